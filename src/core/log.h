/* Rank-aware logging. Megatron prints set-up lines from rank 0 and the training log from the last
 * rank; the same split is kept here. Messages go to stdout (info) or stderr (warn/error).
 * Exports: mg_log_init, mg_log_set_level, mg_log_rank, mg_log_world, mg_log_is_logging_rank,
 * mg_log_info, mg_log_last, mg_log_warn, mg_log_error, mg_log_debug. Needs: core/env. */
#ifndef MG_LOG_H
#define MG_LOG_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

void mg_log_init(int rank, int world_size);
int mg_log_rank(void);
int mg_log_world(void);
bool mg_log_is_logging_rank(void); /* the last rank, as in Megatron's print_rank_last */
/* The level in place of MG_LOG_LEVEL's (0 errors only, 1 info, 2 debug; -1: MG_LOG_LEVEL's
 * again), e.g. from --logging-level. */
void mg_log_set_level(int level);

#define MG_PRINTF(a, b) __attribute__((format(printf, a, b)))
void mg_log_info(const char *fmt, ...) MG_PRINTF(1, 2);  /* rank 0 only */
void mg_log_last(const char *fmt, ...) MG_PRINTF(1, 2);  /* logging (last) rank only */
/* info from this rank whenever `self` holds (e.g. the first rank of each pipeline stage) */
void mg_log_self(bool self, const char *fmt, ...) MG_PRINTF(2, 3);
void mg_log_warn(const char *fmt, ...) MG_PRINTF(1, 2);  /* every rank, "[rank r] warning: " */
void mg_log_error(const char *fmt, ...) MG_PRINTF(1, 2); /* every rank, "[rank r] error: " */
void mg_log_debug(const char *fmt, ...) MG_PRINTF(1, 2); /* every rank when MG_LOG_LEVEL >= 2 */

#ifdef __cplusplus
}
#endif

#endif
