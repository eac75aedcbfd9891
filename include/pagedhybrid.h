/* pagedhybrid — serve hybrid LLMs (Qwen3.5/3.6/3.8 GatedDeltaNet + gated attention, DeepSeek
 * MLA) on the CPU over a packed, paged ABI, and export them for ONNX Runtime GenAI.
 *
 * This header is the whole public C API. Everything behind it is opaque.
 *
 * Conventions
 * - Every fallible call returns a ph_status. PH_OK is 0; every other value is an error from the
 *   one table below (PH_STATUS_TABLE), whose values are explicit and never reused.
 * - Objects carry a detail message for their last failure (which file, which tensor, expected
 *   vs got): ph_model_error(). A constructor that fails still hands back an object when memory
 *   allowed, so the detail can be read (as sqlite3_open does); free it as usual.
 * - Params structs come from *_params_default(); new fields get defaults and never break callers.
 * - Every *_free() accepts NULL.
 * - The library never exits, aborts or prints on bad input; it logs only through the callback
 *   installed with ph_set_log_callback().
 */
#ifndef PAGEDHYBRID_H
#define PAGEDHYBRID_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PH_API __attribute__((visibility("default")))
#else
#define PH_API
#endif

#define PH_VERSION_MAJOR 0
#define PH_VERSION_MINOR 1
#define PH_VERSION_PATCH 0

/* ---- status: one table drives the enum, the names and the messages ------------------------ */

/* X(value, NAME, message). Values are explicit and never reused; append new rows only. */
#define PH_STATUS_TABLE(X)                                                                         \
  X(0, OK, "success")                                                                              \
  X(1, ERR_INVALID_ARGUMENT, "invalid argument")                                                   \
  X(2, ERR_NO_MEMORY, "out of memory")                                                             \
  X(3, ERR_IO, "file could not be opened, read or written")                                        \
  X(4, ERR_NOT_FOUND, "file not found")                                                            \
  X(5, ERR_JSON, "malformed JSON")                                                                 \
  X(6, ERR_CONFIG_MISSING_FIELD, "required configuration field is missing")                        \
  X(7, ERR_CONFIG_INVALID, "configuration field has an invalid type or value")                     \
  X(8, ERR_CONFIG_INCONSISTENT, "configuration fields contradict each other")                      \
  X(9, ERR_UNKNOWN_MODEL_TYPE, "unknown model type")                                               \
  X(10, ERR_UNSUPPORTED, "not supported")                                                          \
  X(11, ERR_SAFETENSORS_HEADER_SIZE, "safetensors header length is implausible")                   \
  X(12, ERR_SAFETENSORS_HEADER, "malformed safetensors header")                                    \
  X(13, ERR_SAFETENSORS_DTYPE, "unknown safetensors dtype")                                        \
  X(14, ERR_SAFETENSORS_SIZE_MISMATCH, "safetensors byte range does not match dtype and shape")    \
  X(15, ERR_SAFETENSORS_RANGE, "safetensors byte range lies outside the data section")             \
  X(16, ERR_SAFETENSORS_OVERLAP, "safetensors tensors overlap")                                    \
  X(17, ERR_SAFETENSORS_TRUNCATED, "safetensors file is truncated")                                \
  X(18, ERR_SAFETENSORS_INDEX, "malformed safetensors shard index")                                \
  X(19, ERR_TENSOR_MISSING, "required tensor is missing from the checkpoint")                      \
  X(20, ERR_TENSOR_SHAPE, "tensor has an unexpected shape")                                        \
  X(21, ERR_TENSOR_DTYPE, "tensor has an unsupported dtype")                                       \
  X(22, ERR_DUPLICATE_TENSOR, "tensor is defined more than once")                                  \
  X(23, ERR_LIMIT, "a size or count exceeds a supported limit")                                    \
  X(24, ERR_INTERNAL, "internal error")                                                            \
  X(25, ERR_ONNX, "malformed ONNX model")                                                          \
  X(26, ERR_NON_FINITE, "a value that must be finite is NaN or infinite")                          \
  X(27, ERR_TOKENIZER, "malformed or unsupported tokenizer file")                                  \
  X(28, ERR_TEMPLATE, "chat template could not be parsed or rendered")

typedef enum ph_status {
#define PH_STATUS_ENUM_(value, name, message) PH_##name = value,
  PH_STATUS_TABLE(PH_STATUS_ENUM_)
#undef PH_STATUS_ENUM_
} ph_status;

/* "PH_ERR_IO" for PH_ERR_IO; "PH_UNKNOWN_STATUS" for a value not in the table. Static strings. */
PH_API const char *ph_status_name(ph_status status);
/* One-line human message for the status ("file not found"). Static string. */
PH_API const char *ph_status_message(ph_status status);

/* ---- version and logging --------------------------------------------------------------------- */

PH_API const char *ph_version_string(void);

typedef enum ph_log_level {
  PH_LOG_ERROR = 0,
  PH_LOG_WARN = 1,
  PH_LOG_INFO = 2,
  PH_LOG_DEBUG = 3,
} ph_log_level;

/* Called with one formatted line (no trailing newline). May be called from any library thread;
 * the callback must be thread-safe and must not call ph_set_log_callback() (it runs under the
 * lock that makes replacing the callback safe: once ph_set_log_callback() returns, no thread is
 * still inside the old one). */
typedef void (*ph_log_fn)(void *user, ph_log_level level, const char *message);

/* Process-wide. fn == NULL silences the library (the default). Messages above max_level are
 * dropped before formatting. */
PH_API void ph_set_log_callback(ph_log_fn fn, void *user, ph_log_level max_level);

/* ---- element types -----------------------------------------------------------------------------
 */

typedef enum ph_dtype {
  PH_DTYPE_INVALID = 0,
  PH_DTYPE_F32 = 1,
  PH_DTYPE_F16 = 2,
  PH_DTYPE_BF16 = 3,
  PH_DTYPE_I64 = 4,
  PH_DTYPE_I32 = 5,
  PH_DTYPE_I8 = 6,
  PH_DTYPE_U8 = 7,
  PH_DTYPE_F8E4M3 = 8, /* recognised in checkpoints; not computed with yet */
} ph_dtype;

/* "f32", "bf16", ...; "invalid" for anything else. */
PH_API const char *ph_dtype_name(ph_dtype dtype);

/* ---- CPU features ------------------------------------------------------------------------------
 */

/* What this CPU and OS can actually run: the CPUID bit and the OS having enabled the register
 * state (XGETBV), both. */
typedef struct ph_cpu_features {
  int avx2;
  int fma;
  int f16c;
  int avx512f;
  int avx512bw;
  int avx512vl;
  int avx512_vnni;
  int avx512_bf16;
} ph_cpu_features;

PH_API ph_cpu_features ph_cpu_detect(void);

/* ---- models: a Hugging Face checkpoint directory, opened ------------------------------------- */

typedef struct ph_model ph_model;

typedef struct ph_model_params {
  /* 1: map the safetensors and check every tensor the geometry predicts (name, shape, dtype).
   * 0: read config.json only (enough to inspect a huge model without its weights). */
  int load_weights;
} ph_model_params;

PH_API ph_model_params ph_model_params_default(void);

/* Opens DIR (config.json + model.safetensors or model.safetensors.index.json + shards). On
 * failure returns the error and, when memory allowed, still sets *out to an object whose
 * ph_model_error() explains the failure; free it. params may be NULL (defaults). */
PH_API ph_status ph_model_open(const char *dir, const ph_model_params *params, ph_model **out);

PH_API void ph_model_free(ph_model *model);

/* Detail of the last failure on this object ("" when none). Valid until the next call on it. */
PH_API const char *ph_model_error(const ph_model *model);

typedef enum ph_layer_kind {
  PH_LAYER_LINEAR_ATTENTION = 0, /* GatedDeltaNet: fixed conv + recurrent state */
  PH_LAYER_FULL_ATTENTION = 1,   /* gated full attention: paged K/V */
  PH_LAYER_MLA = 2, /* DeepSeek multi-head latent attention: one latent row per token */
} ph_layer_kind;

/* A summary of an opened model. Strings point into the model and live as long as it. */
typedef struct ph_model_info {
  const char *model_type;      /* as in config.json's top level ("qwen3_5") */
  const char *text_model_type; /* the text model's type ("qwen3_5_text") */
  const char *architecture;    /* architectures[0], or "" */
  ph_dtype dtype;              /* checkpoint dtype from config ("dtype"/"torch_dtype") */
  int n_layers;
  int n_full_attention_layers;
  int n_linear_attention_layers;
  int64_t hidden_size;
  int64_t vocab_size;
  int64_t parameters;   /* counted from the tensors bound (or predicted without weights) */
  int64_t weight_bytes; /* bytes of the bound tensors as stored (or predicted) */
  int weights_loaded;
} ph_model_info;

PH_API ph_status ph_model_get_info(const ph_model *model, ph_model_info *out);

/* Kind of layer `layer` (0-based); returns PH_ERR_INVALID_ARGUMENT when out of range. */
PH_API ph_status ph_model_layer_kind(const ph_model *model, int layer, ph_layer_kind *out);

/* Bytes of fixed (per-sequence) state over all linear-attention layers: conv state stored in
 * conv_dtype [conv_dim, K-1] plus FP32 recurrent state [Hv, Dv, Dk]. */
PH_API int64_t ph_model_fixed_state_bytes(const ph_model *model, ph_dtype conv_dtype);

/* Bytes of KV cache one token occupies over all full-attention (or MLA) layers in kv_dtype. */
PH_API int64_t ph_model_kv_bytes_per_token(const ph_model *model, ph_dtype kv_dtype);

/* ---- the serving engine: continuous batching over the packed paged graph ---------------------
 *
 * Modelled on ONNX Runtime GenAI's Engine and Request. An engine runs one model (a Hugging Face
 * checkpoint directory, or a package exported with `--layout paged`: its genai_config.json
 * state_groups, names and engine.dynamic_batching bind the graph). Requests are added and
 * removed from any thread; ph_engine_step() runs one packed step of every scheduled request.
 * Each request's tokens are bit-identical to running it alone (docs/engine.md). */

typedef struct ph_engine ph_engine;

/* Logits capture: what requests keep of their logits (F32, vocab_size a row), read with
 * ph_engine_request_logits. The memory is allocated when a request is added: one row per token
 * it may generate (SAMPLED) or per position it may run (POSITIONS). */
typedef enum ph_logits_capture {
  PH_CAPTURE_NONE = 0,
  PH_CAPTURE_SAMPLED = 1,   /* the row each token was sampled from: n_generated rows, row j
                               produced generated token j */
  PH_CAPTURE_POSITIONS = 2, /* the row of every position run: n_prompt + n_generated - 1 rows
                               (the last token is never run), row t computed at position t
                               predicts token t + 1. Needs every row of the LM head:
                               set it in ph_engine_params.capture_logits so that a checkpoint's
                               graph is built so; a package that prunes its LM head to the last
                               row per sequence cannot give it (PH_ERR_UNSUPPORTED) */
} ph_logits_capture;

/* The arithmetic of the linear layers (docs/precision.md). f32: f32 products and sums throughout
 * (the numerics of every release so far). bf16: every linear layer (LM head included; MoE
 * experts excepted) rounds its input rows to bf16 and sums bf16 x bf16 products in f32 in the
 * order of the AVX-512 BF16 dot instruction, as a bf16 deployment computes; everything else stays
 * f32. auto: bf16 when the checkpoint's linear weights are stored bf16, else f32. Outputs are
 * bit-identical batched or alone in every mode. */
typedef enum ph_precision {
  PH_PRECISION_AUTO = 0,
  PH_PRECISION_F32 = 1,
  PH_PRECISION_BF16 = 2,
} ph_precision;

/* "auto", "f32", "bf16"; "unknown" otherwise. Static. */
PH_API const char *ph_precision_name(ph_precision precision);

/* Weight quantization (docs/quantization.md): linear layers stored as com.microsoft::MatMulNBits
 * int8 or int4 blocks, ONNX Runtime's layout. Zero-initialized = none. What is never quantized:
 * the embedding gather, norms, biases, the GatedDeltaNet a/b/A_log/dt_bias/conv paths, MoE
 * routers and shared-expert gates (models/weights.h weight_role_quantizable). */
typedef struct ph_quant_params {
  int32_t bits;           /* 0: none; 4 or 8 */
  int32_t block_size;     /* weights per scale along K: a power of two >= 16 (0: 32) */
  int32_t asymmetric;     /* 1: a zero point per block; 0: symmetric (scale only, ORT's default
                             zero point 2^(bits-1)) */
  int32_t accuracy_level; /* MatMulNBits accuracy_level (ORT's meaning): 4 computes with the
                             activations quantized to int8 per row and per block (VNNI); 1 in
                             f32 (weights dequantized); 0: 4 */
  const char *skip;       /* comma-separated names: a weight whose checkpoint name contains any
                             of them stays in its dtype (e.g. "lm_head,layers.0."); NULL: none.
                             Copied where kept. */
} ph_quant_params;

/* Prefix caching (docs/prefix-cache.md): a request whose prompt starts with tokens an earlier
 * request computed takes their KV pages by reference and the linear layers' state by copy, and
 * computes only the rest, with tokens and logits bit-identical to computing it all. */
typedef enum ph_prefix_cache_mode {
  PH_PREFIX_CACHE_AUTO = 0, /* on */
  PH_PREFIX_CACHE_ON = 1,
  PH_PREFIX_CACHE_OFF = 2,
} ph_prefix_cache_mode;

typedef struct ph_engine_params {
  int32_t max_batch_size;       /* sequences per step; 0: the package's, capped at 64, else 16 */
  int64_t max_scheduled_tokens; /* token budget per step; 0: the package's, else 2048 */
  int64_t prefill_chunk;        /* prompt tokens per step per request; 0: min(256, budget) */
  int32_t num_blocks;           /* KV pages; 0: from memory_bytes */
  int64_t memory_bytes;         /* KV pages + fixed state budget when num_blocks is 0; 0: 1 GiB */
  int32_t max_requests;         /* requests holding state at once; 0: max_batch_size */
  int n_threads;                /* <= 0: all CPUs */
  int64_t block_size;           /* checkpoints: tokens per page (0: 16) */
  int64_t max_context;          /* checkpoints: context bound (0: min(max_position, 32768)) */
  ph_dtype io_dtype;            /* checkpoints: activation dtype (PH_DTYPE_INVALID: f32) */
  ph_logits_capture capture_logits;  /* what requests keep of their logits (0: nothing); see
                                        ph_engine_set_capture_logits */
  int32_t state_update_capacity;     /* compact state updates, what speculative decoding needs on a
                                        model with linear-attention layers (0..8; abi.md §8.4):
                                        checkpoints build their graph with it (0: none, speculative
                                        requests are refused); packages: 0 takes the package's, any
                                        other value must equal it */
  ph_precision precision;            /* linear-layer arithmetic (0, auto: from the weights' dtype);
                                        ph_engine_info.params gives the one resolved, f32 or bf16 */
  ph_quant_params quant;             /* checkpoints: linear weights quantized when loaded (bits 0:
                                        none; the other fields then 0 too). Packages run the
                                        weights they were exported with: bits != 0 on a package is
                                        PH_ERR_INVALID_ARGUMENT. A bad field is
                                        PH_ERR_INVALID_ARGUMENT naming it. ph_engine_info.params
                                        gives it resolved (block 32, accuracy level 4 for 0;
                                        skip: the engine's copy, valid while it is open; a
                                        package's as exported, skip NULL) */
  ph_prefix_cache_mode prefix_cache; /* prompt prefixes reused across requests (0, auto: on;
                                       docs/prefix-cache.md); ph_engine_info.params gives ON or
                                       OFF */
  int64_t prefix_cache_bytes;        /* memory for the linear layers' state snapshots the prefix
                                        cache keeps (0: a quarter of the KV + state cache's
                                        bytes, and at least one snapshot per max_requests (4 at least));
                                        cached KV pages live in        the page pool and cost nothing extra */
} ph_engine_params;

PH_API ph_engine_params ph_engine_params_default(void);

#define PH_MAX_STOP_TOKENS  16
#define PH_MAX_DRAFT_TOKENS 8 /* drafts verified per step (state_update_capacity's bound) */

/* Where a request's speculative drafts come from (docs/speculative.md). Every draft is verified:
 * a drafted token is kept only when it equals the token the request's sampler draws at that
 * index, from the same (seed, index), so the output is the same with any method or none. */
typedef enum ph_draft_method {
  PH_DRAFT_NONE = 0,   /* no speculation */
  PH_DRAFT_NGRAM = 1,  /* prompt lookup: what followed the latest earlier match of the context's
                          last n tokens (no extra weights) */
  PH_DRAFT_MTP = 2,    /* the checkpoint's own multi-token-prediction head (Qwen3.5 mtp.*) */
  PH_DRAFT_REPLAY = 3, /* a given continuation (benchmarks: it sets the acceptance rate) */
} ph_draft_method;

/* "none", "ngram", "mtp", "replay"; "unknown" otherwise. Static. */
PH_API const char *ph_draft_method_name(ph_draft_method method);

typedef struct ph_speculative_params {
  ph_draft_method method;
  int32_t num_draft_tokens;     /* drafts per step, 1..PH_MAX_DRAFT_TOKENS, and no more than the
                                   engine's state_update_capacity on a hybrid model (0: 4) */
  int32_t ngram_min, ngram_max; /* n-gram lengths tried, longest first, 1 <= min <= max <= 16
                                   (0, 0: 1 and 4) */
  const int64_t *replay_tokens; /* replay: the continuation proposed, token i drafted for
                                   generated index i; copied when the request is added */
  int64_t n_replay_tokens;
} ph_speculative_params;

typedef struct ph_sampling_params {
  float temperature;      /* 0: greedy */
  int32_t top_k;          /* 0: off */
  float top_p;            /* 1: off */
  float min_p;            /* 0: off */
  uint64_t seed;          /* with the token index, the only randomness: reproducible */
  int64_t max_new_tokens; /* >= 1 */
  int32_t n_stop_token_ids;
  int64_t stop_token_ids[PH_MAX_STOP_TOKENS];
  int ignore_eos; /* 1: the model's end-of-sequence ids do not stop the request */
  ph_speculative_params speculative; /* default: none */
} ph_sampling_params;

PH_API ph_sampling_params ph_sampling_params_default(void); /* greedy, 16 new tokens */

/* Opens dir. On failure returns the error and, when memory allowed, still sets *out to an
 * object whose ph_engine_error() explains it; free it. params may be NULL. */
PH_API ph_status ph_engine_create(const char *dir, const ph_engine_params *params, ph_engine **out);
PH_API void ph_engine_free(ph_engine *engine);
PH_API const char *ph_engine_error(const ph_engine *engine); /* last failure on this object */

typedef enum ph_finish_reason {
  PH_FINISH_NONE = 0,    /* still running */
  PH_FINISH_LENGTH = 1,  /* max_new_tokens, or the context is full */
  PH_FINISH_STOP = 2,    /* a stop token or end-of-sequence (included in the output) */
  PH_FINISH_ABORTED = 3, /* removed */
  PH_FINISH_ERROR = 4,   /* refused, or its logits were not finite (PH_ERR_NON_FINITE):
                            ph_request_info.status and .message say why */
} ph_finish_reason;

/* "running", "length", "stop", "aborted", "error"; "unknown" for a value not listed. Static. */
PH_API const char *ph_finish_reason_name(ph_finish_reason reason);

/* Called on the stepping thread for each new token, and once with token -1 when the request
 * finishes. Must not call ph_engine_step. */
typedef void (*ph_token_fn)(void *user, uint64_t request_id, int64_t token,
                            ph_finish_reason reason);
PH_API void ph_engine_set_callback(ph_engine *engine, ph_token_fn fn, void *user);

/* Thread-safe. Queues a request (prompt copied); *id receives its id. A request the model
 * cannot serve (empty prompt, token outside the vocabulary, prompt beyond the context,
 * impossible sampling parameters) is accepted here and finishes PH_FINISH_ERROR at the next
 * step without disturbing others. */
PH_API ph_status ph_engine_add_request(ph_engine *engine, const int64_t *prompt, int64_t n_prompt,
                                       const ph_sampling_params *sampling, uint64_t *id);
/* Thread-safe. Aborts the request at the next step (PH_FINISH_ABORTED). */
PH_API ph_status ph_engine_remove_request(ph_engine *engine, uint64_t id);

typedef struct ph_step_info {
  uint64_t step;
  int32_t batch_size;  /* sequences run this step; 0 when idle */
  int64_t n_tokens;    /* tokens run */
  int64_t n_generated; /* tokens sampled */
  int32_t n_running, n_waiting, n_preempted, n_finished;
  int32_t pages_used, pages_total, slots_used, slots_total;
  uint64_t state_bytes_moved;
  double seconds;
  int32_t n_admitted; /* waiting requests admitted (given pages and a state slot) this step */
  int64_t n_drafted;  /* speculative drafts verified this step */
  int64_t n_accepted; /* of which kept */
} ph_step_info;

/* One step: schedule, run, sample, commit. info may be NULL. */
PH_API ph_status ph_engine_step(ph_engine *engine, ph_step_info *info);
/* 1 while any request is queued or running. */
PH_API int ph_engine_busy(ph_engine *engine);

typedef struct ph_request_info {
  ph_finish_reason finish;
  ph_status status; /* PH_OK unless PH_FINISH_ERROR */
  char message[256];
  int64_t n_prompt, n_generated, n_preemptions;
  double queue_ms, time_to_first_token_ms, total_ms; /* -1 when not reached */
  int64_t n_drafted, n_accepted;                     /* speculative drafts verified, and kept */
  int64_t n_cached_tokens; /* prompt tokens served from the prefix cache when it was last
                              admitted (0: none, or not admitted yet) */
} ph_request_info;

/* Thread-safe. */
PH_API ph_status ph_engine_request_info(ph_engine *engine, uint64_t id, ph_request_info *out);
/* Thread-safe: copies up to max tokens generated since the last call; returns the count, or -1
 * for an unknown id. */
PH_API int64_t ph_engine_read_tokens(ph_engine *engine, uint64_t id, int64_t *out, int64_t max);
/* Forgets a finished request. */
PH_API ph_status ph_engine_release_request(ph_engine *engine, uint64_t id);

/* Every token request id has generated so far, without consuming them (ph_engine_read_tokens
 * keeps its own cursor); *n receives the count. NULL (and *n 0) for an unknown or released id.
 * The pointer is valid until the request is released; read it between steps, on the stepping
 * thread. */
PH_API const int64_t *ph_engine_request_tokens(ph_engine *engine, uint64_t id, int64_t *n);

/* Changes the capture for requests added from now on (call before adding requests from other
 * threads). PH_CAPTURE_POSITIONS is PH_ERR_UNSUPPORTED unless the engine was created with it
 * (its graph computes every row of the LM head). */
PH_API ph_status ph_engine_set_capture_logits(ph_engine *engine, ph_logits_capture mode);
/* The captured rows of request id, [*n, vocab_size]; NULL (and *n 0) for an unknown id or one
 * added with capture off. Valid until the request is released; read between steps. */
PH_API const float *ph_engine_request_logits(ph_engine *engine, uint64_t id, int64_t *n);

/* What an open engine serves, and the parameters it resolved at creation. */
typedef struct ph_engine_info {
  ph_engine_params params;         /* every 0 replaced by the value it stands for */
  int64_t vocab_size;              /* logits per row; token ids are below it */
  int64_t max_context;             /* positions a request may reach (prompt + generated) */
  int64_t block_size;              /* tokens per KV page */
  int32_t kv_pages;                /* KV pages requests can hold (the null page not counted) */
  int64_t cache_bytes;             /* KV pages + fixed-state slots, allocated at creation */
  int64_t state_bytes_per_request; /* one fixed-state slot (conv + recurrent state) */
  int64_t kv_bytes_per_token;      /* KV page bytes per token over all attention layers */
  int32_t max_draft_tokens;        /* drafts a speculative step may verify (0: speculative
                                      requests are refused; see state_update_capacity) */
  int has_mtp;                     /* 1: PH_DRAFT_MTP is served (the checkpoint's MTP head) */
  int32_t quantized_linears;       /* linear layers stored as MatMulNBits int4/int8 blocks in
                                      the served graph (0: none; params.quant says how) */
} ph_engine_info;

PH_API ph_status ph_engine_get_info(const ph_engine *engine, ph_engine_info *out);

/* What the prefix cache did since the engine opened (counters) and holds now (gauges), as of the
 * last step. All 0 (enabled 0) when it is off. */
typedef struct ph_prefix_cache_stats {
  int enabled;
  int64_t lookups;          /* admissions that looked for a cached prefix (a preempted request
                               looks again when it resumes) */
  int64_t hits;             /* of which found one */
  int64_t misses;           /* lookups - hits */
  int64_t tokens_looked_up; /* prompt tokens of those admissions */
  int64_t tokens_saved;     /* of which served from the cache (not computed) */
  int32_t pages_cached;     /* KV pages findable by their tokens, held by requests or not */
  int32_t pages_evictable;  /* of which no request holds: kept until their memory is needed */
  int64_t page_bytes_held;  /* memory of the evictable pages (held only by the cache) */
  int64_t pages_evicted;    /* cached pages whose memory was taken back */
  int32_t snapshots;        /* linear-layer state snapshots held */
  int32_t snapshots_max;    /* what the budget holds */
  int64_t snapshot_bytes;   /* memory of the snapshots held */
  int64_t snapshot_budget_bytes;
  int64_t snapshots_taken, snapshots_evicted;
} ph_prefix_cache_stats;

/* Thread-safe. */
PH_API ph_status ph_engine_prefix_cache_stats(ph_engine *engine, ph_prefix_cache_stats *out);
/* Drops everything cached that no request holds (evictable pages and every snapshot), e.g. to
 * measure a cold start. Call between steps, on the stepping thread. */
PH_API ph_status ph_engine_prefix_cache_clear(ph_engine *engine);

/* ---- text: tokenizer, chat template, streaming detokenization --------------------------------- *
 * A checkpoint's own Hugging Face tokenizer (tokenizer.json: NFC normalizer, Split-regex +
 * ByteLevel pre-tokenizer, BPE, added/special tokens; docs/tokenizer.md) and chat template
 * (Jinja, rendered by our own interpreter of the subset real templates use; docs/chat-template.md).
 * A ph_tokenizer is read-only once open: every function below that takes a const ph_tokenizer may
 * be called from many threads at once. Strings handed out are malloc'ed: free them with ph_free. */

typedef struct ph_tokenizer ph_tokenizer;

/* Opens the tokenizer of a checkpoint or package directory: tokenizer.json (required),
 * tokenizer_config.json (special tokens, add_bos_token, chat_template), chat_template.jinja
 * (preferred over tokenizer_config's chat_template when both exist) and generation_config.json
 * (eos_token_id). PH_ERR_NOT_FOUND when dir has no tokenizer.json. A chat template that cannot be
 * parsed does not fail the open: ph_chat_render reports it. On failure returns the error and,
 * when memory allowed, still sets *out to an object whose ph_tokenizer_error() explains it. */
PH_API ph_status ph_tokenizer_open(const char *dir, ph_tokenizer **out);
PH_API void ph_tokenizer_free(ph_tokenizer *tok);
PH_API const char *ph_tokenizer_error(const ph_tokenizer *tok); /* why ph_tokenizer_open failed */
PH_API void ph_free(void *p); /* frees what the text functions hand out */

typedef struct ph_tokenizer_info {
  int64_t vocab_size; /* ids are below it: the model's vocabulary and the added tokens */
  int64_t bos_id;     /* -1: none */
  int add_bos;        /* tokenizer_config add_bos_token: encode with add_special prepends bos_id */
  int32_t n_eos_ids;  /* generation_config.json eos_token_id (one or a list), else the
                         tokenizer's eos_token; at most PH_MAX_STOP_TOKENS */
  int64_t eos_ids[PH_MAX_STOP_TOKENS];
  int has_chat_template; /* 1: a template was found (it may still fail to parse) */
} ph_tokenizer_info;

PH_API ph_status ph_tokenizer_get_info(const ph_tokenizer *tok, ph_tokenizer_info *out);

/* Encodes len bytes of UTF-8 text into *ids (malloc'ed, *n of them; free with ph_free). Byte
 * sequences that are not UTF-8 are read as U+FFFD, as a WHATWG UTF-8 decoder reads them. Special
 * tokens written in the text are recognised (as Hugging Face does by default). add_special: 1
 * adds what the tokenizer's configuration asks (BOS when add_bos_token); 0 adds nothing (what a
 * rendered chat template is encoded with). */
PH_API ph_status ph_tokenizer_encode(const ph_tokenizer *tok, const char *text, size_t len,
                                     int add_special, int64_t **ids, int64_t *n);
/* Decodes n ids into *text (malloc'ed, NUL-terminated, *len bytes without the NUL; free with
 * ph_free). skip_special: 1 leaves out special tokens. Bytes that do not form UTF-8 become U+FFFD.
 * An id that is no token (>= vocab_size, as a model whose vocabulary is padded beyond the
 * tokenizer's may generate, or a gap in the vocabulary) gives no text, as Hugging Face's decode
 * drops it; a negative id is PH_ERR_INVALID_ARGUMENT. */
PH_API ph_status ph_tokenizer_decode(const ph_tokenizer *tok, const int64_t *ids, int64_t n,
                                     int skip_special, char **text, size_t *len);
/* The id of a token's exact text (vocabulary entry or added token); -1 when there is none. */
PH_API int64_t ph_tokenizer_token_id(const ph_tokenizer *tok, const char *token);

/* Renders the tokenizer's chat template. messages_json: a JSON array of messages ({"role",
 * "content", and whatever else the template reads: tool_calls, reasoning_content, ...}).
 * extra_json: NULL or a JSON object whose members become template variables too (tools,
 * enable_thinking, ...). The template also sees add_generation_prompt and the tokenizer's special
 * tokens (bos_token, eos_token, ...). *text: malloc'ed, NUL-terminated (free with ph_free).
 * Errors: PH_ERR_JSON (messages/extra), PH_ERR_NOT_FOUND (no template), PH_ERR_TEMPLATE (a
 * construct the interpreter does not support, or raise_exception: never a wrong prompt);
 * err (may be NULL) receives a message naming the template line. */
PH_API ph_status ph_chat_render(const ph_tokenizer *tok, const char *messages_json,
                                const char *extra_json, int add_generation_prompt, char **text,
                                size_t *len, char *err, size_t err_cap);

/* Streaming detokenization with stop strings: feed a request's generated tokens one at a time;
 * what comes out, concatenated, is exactly ph_tokenizer_decode of those tokens, cut before the
 * first occurrence of any stop string. A piece never ends inside a UTF-8 character, and text
 * that could still be the start of a stop string is held back until it cannot. One stream per
 * request, used by one thread at a time. */
typedef struct ph_text_stream ph_text_stream;

#define PH_MAX_STOP_STRINGS 16
/* stops: n_stops (<= PH_MAX_STOP_STRINGS) non-empty NUL-terminated strings of valid UTF-8,
 * copied; PH_ERR_INVALID_ARGUMENT otherwise (a stop string is matched against decoded text, which
 * is always valid UTF-8). */
PH_API ph_status ph_text_stream_create(const ph_tokenizer *tok, const char *const *stops,
                                       int n_stops, int skip_special, ph_text_stream **out);
PH_API void ph_text_stream_free(ph_text_stream *s);
/* Feeds one token. *piece, *len: the text now safe to show (may be empty; valid until the next
 * call on s). *stopped becomes 1 when a stop string completed: the text before it has been
 * handed out, nothing after it ever will be, and the request should be removed. A token that is
 * no token of the tokenizer gives no text (as in ph_tokenizer_decode); a negative one is
 * PH_ERR_INVALID_ARGUMENT. */
PH_API ph_status ph_text_stream_push(ph_text_stream *s, int64_t token, const char **piece,
                                     size_t *len, int *stopped);
/* Generation ended: the text held back (a partial stop string; an unfinished character as
 * U+FFFD, as ph_tokenizer_decode gives it). */
PH_API ph_status ph_text_stream_finish(ph_text_stream *s, const char **piece, size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* PAGEDHYBRID_H */
