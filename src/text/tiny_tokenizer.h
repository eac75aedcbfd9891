/* tiny_tokenizer — the tokenizer files make-tiny writes beside its random-weight checkpoints, so
 * that text flows through tiny models too: a byte-level BPE tokenizer.json of our own, a
 * tokenizer_config.json with a short ChatML-style chat template written for this project, and a
 * generation_config.json naming the end-of-turn tokens.
 *
 * Layout for a model vocabulary of V ids (every id below V):
 *   V >= 259: the 256 byte tokens (ids 0..255, in byte order), the specials <|endoftext|>,
 *             <|im_start|>, <|im_end|> (256, 257, 258), then merges from 259 up;
 *   246 <= V < 259: the 243 bytes that can occur in UTF-8 (all but C0, C1, F5..FF: the encoder
 *             repairs its input to valid UTF-8 first, so they never reach the BPE) as ids
 *             0..242, the specials as 243..245, then merges from 246 (the default V = 256 gets
 *             10 merges);
 *   V < 246:  PH_ERR_INVALID_ARGUMENT (too small for a byte-level tokenizer).
 * Merges are learned, deterministically, from a short English text embedded here: the most
 * frequent adjacent pair (ties: the lowest ids), until V ids are used or no pair repeats. */
#ifndef PH_TEXT_TINY_TOKENIZER_H
#define PH_TEXT_TINY_TOKENIZER_H

#include <stdint.h>

#include "base/diag.h"

/* The smallest vocabulary tiny_tokenizer_write accepts. */
#define TINY_TOKENIZER_MIN_VOCAB 246

/* Writes dir/tokenizer.json, dir/tokenizer_config.json and dir/generation_config.json (dir must
 * exist), then opens them back with ph_tokenizer_open as a check. */
ph_status tiny_tokenizer_write(const char *dir, int64_t vocab_size, diag *d);

#endif /* PH_TEXT_TINY_TOKENIZER_H */
