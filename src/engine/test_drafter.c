/* test_drafter — n-gram prompt lookup and replay drafts against hand-worked contexts. */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "engine/drafter.h"

static void test_ngram(void) {
  int64_t out[8];
  /* "1 2 3 9 1 2 3" -> the 3-gram "1 2 3" matched at 0 is followed by 9 1 2 3 */
  const int64_t a[] = {1, 2, 3, 9, 1, 2, 3};
  CHECK_EQ_INT(draft_ngram(a, 7, 1, 3, 8, out), 4);
  CHECK_EQ_INT(out[0], 9);
  CHECK_EQ_INT(out[3], 3);
  CHECK_EQ_INT(draft_ngram(a, 7, 1, 3, 2, out), 2); /* k bounds the drafts */
  /* the latest occurrence wins: "5 7 ... 5 8 ... 5" drafts 8 */
  const int64_t b[] = {5, 7, 0, 5, 8, 0, 5};
  CHECK_EQ_INT(draft_ngram(b, 7, 1, 1, 1, out), 1);
  CHECK_EQ_INT(out[0], 8);
  /* the longest n first: the 2-gram "0 5" (at 2..3, then 8) beats nothing longer; with
   * max_n 1 the latest 1-gram "5" is at 3 too */
  CHECK_EQ_INT(draft_ngram(b, 7, 2, 2, 1, out), 1);
  CHECK_EQ_INT(out[0], 8);
  /* longer n preferred over the latest short match: "1 2 | 3 ... 4 2 | 6 ... 1 2" */
  const int64_t c[] = {1, 2, 3, 4, 2, 6, 1, 2};
  CHECK_EQ_INT(draft_ngram(c, 8, 1, 2, 1, out), 1);
  CHECK_EQ_INT(out[0], 3); /* "1 2" -> 3, not the later "2" -> 6 */
  CHECK_EQ_INT(draft_ngram(c, 8, 1, 1, 1, out), 1);
  CHECK_EQ_INT(out[0], 6);
  /* a run: "4 4 4" drafts 4s from the shifted match, never past the end */
  const int64_t r[] = {4, 4, 4};
  CHECK_EQ_INT(draft_ngram(r, 3, 1, 2, 8, out), 1);
  CHECK_EQ_INT(out[0], 4);
  /* no match, too short, bad arguments */
  const int64_t u[] = {1, 2, 3, 4};
  CHECK_EQ_INT(draft_ngram(u, 4, 1, 3, 4, out), 0);
  CHECK_EQ_INT(draft_ngram(u, 1, 1, 3, 4, out), 0);
  CHECK_EQ_INT(draft_ngram(a, 7, 0, 3, 4, out), 0);
  CHECK_EQ_INT(draft_ngram(a, 7, 3, 2, 4, out), 0);
  CHECK_EQ_INT(draft_ngram(a, 7, 1, 3, 0, out), 0);
}

static void test_replay(void) {
  int64_t out[4];
  const int64_t cont[] = {10, 11, 12, 13, 14};
  CHECK_EQ_INT(draft_replay(cont, 5, 1, 3, out), 3);
  CHECK_EQ_INT(out[0], 11);
  CHECK_EQ_INT(out[2], 13);
  CHECK_EQ_INT(draft_replay(cont, 5, 3, 4, out), 2); /* clipped at the end */
  CHECK_EQ_INT(out[1], 14);
  CHECK_EQ_INT(draft_replay(cont, 5, 5, 4, out), 0);
  CHECK_EQ_INT(draft_replay(cont, 5, -1, 4, out), 0);
  CHECK_EQ_INT(draft_replay(cont, 5, 0, 0, out), 0);
}

int main(void) {
  RUN(test_ngram);
  RUN(test_replay);
  return check_finish();
}
