/* attn/error.h: error codes, input identifiers and the caller-owned error
 * record of the core.
 *
 * Every core function that can fail returns 0 or a negative ATTN_E* code and,
 * when given an attn_error_t, fills it with the code, the offending input (as
 * an attn_field_t, and as its name in attn_params_t) and a message that names
 * that input and its dimensions. */
#ifndef ATTN_ERROR_H
#define ATTN_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define ATTN_ERRNO_MAP(X)                                                      \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ERANK, -2, "tensor has the wrong rank")                                    \
  X(ESHAPE, -3, "tensor shapes do not fit")                                    \
  X(EHEADS, -4, "head counts do not divide")                                   \
  X(ERANGE, -5, "value out of range")                                          \
  X(EOVERFLOW, -6, "size overflows")                                           \
  X(ENOSPC, -7, "workspace too small")                                         \
  X(ENOTSUP, -8, "not supported here")                                         \
  X(ECANCELED, -9, "canceled")                                                 \
  X(ENUMERIC, -10, "result overflows float32")                                 \
  X(EDEVICE, -11, "the device failed")

typedef enum {
#define ATTN__ERR_ENUM(name, value, msg) ATTN_##name = (value),
  ATTN_ERRNO_MAP(ATTN__ERR_ENUM)
#undef ATTN__ERR_ENUM
} attn_errno_t;

/* Every input the core can name in an error: X(name, spelling), the
 * spelling being the member's name in attn_params_t, attn_exec_t or
 * attn_outputs_t ("workspace" is attn_forward's argument; "rope.theta" a
 * member of attn_params_t's rope). Callers that map
 * errors to their own names (JSON paths, flags) switch on attn_field_t, so a
 * renamed spelling cannot silently break them. The numeric values follow
 * this list and may change when it grows: compare with the names. */
#define ATTN_FIELD_MAP(X)                                                      \
  X(NONE, "")                                                                  \
  X(QUERY, "query")                                                            \
  X(KEY, "key")                                                                \
  X(VALUE, "value")                                                            \
  X(Q_WEIGHT, "q_weight")                                                      \
  X(K_WEIGHT, "k_weight")                                                      \
  X(V_WEIGHT, "v_weight")                                                      \
  X(O_WEIGHT, "o_weight")                                                      \
  X(Q_BIAS, "q_bias")                                                          \
  X(K_BIAS, "k_bias")                                                          \
  X(V_BIAS, "v_bias")                                                          \
  X(O_BIAS, "o_bias")                                                          \
  X(CAUSAL, "causal")                                                          \
  X(KEY_LENGTHS, "key_lengths")                                                \
  X(ALLOW, "allow")                                                            \
  X(BIAS, "bias")                                                              \
  X(WINDOW_LEFT, "window_left")                                                \
  X(WINDOW_RIGHT, "window_right")                                              \
  X(SCALE, "scale")                                                            \
  X(SOFTCAP, "softcap")                                                        \
  X(ALIBI, "alibi")                                                            \
  X(ALIBI_SLOPES, "alibi_slopes")                                              \
  X(ROPE_STYLE, "rope.style")                                                  \
  X(ROPE_THETA, "rope.theta")                                                  \
  X(ROPE_DIMS, "rope.dims")                                                    \
  X(ROPE_SCALING, "rope.scaling")                                              \
  X(ROPE_FACTOR, "rope.factor")                                                \
  X(ROPE_LOW_FREQ_FACTOR, "rope.low_freq_factor")                              \
  X(ROPE_HIGH_FREQ_FACTOR, "rope.high_freq_factor")                            \
  X(ROPE_ORIGINAL_MAX_POSITION, "rope.original_max_position")                  \
  X(POSITIONS_QUERY, "positions_query")                                        \
  X(POSITIONS_KEY, "positions_key")                                            \
  X(Q_NORM, "q_norm")                                                          \
  X(K_NORM, "k_norm")                                                          \
  X(NORM_EPS, "norm_eps")                                                      \
  X(NUM_HEADS, "num_heads")                                                    \
  X(NUM_KV_HEADS, "num_kv_heads")                                              \
  X(THREADS, "threads")                                                        \
  X(ISA, "isa")                                                                \
  X(OUT, "out")                                                                \
  X(WEIGHTS, "weights")                                                        \
  X(MEAN_WEIGHTS, "mean_weights")                                              \
  X(HEAD_OUTPUTS, "head_outputs")                                              \
  X(WORKSPACE, "workspace")                                                    \
  X(CANCEL, "cancel")                                                          \
  X(KV, "kv")                                                                  \
  X(BACKEND, "backend")                                                        \
  X(PRECISION, "precision")                                                    \
  X(TOP_K, "top_k")                                                            \
  X(POOL, "pool")                                                              \
  X(POOL_REDUCE, "pool_reduce")                                                \
  X(STATS, "stats")                                                            \
  X(SINK_TOKENS, "sink_tokens")                                                \
  X(QUERY_RANGE, "query_range")                                                \
  X(KEY_RANGE, "key_range")                                                    \
  X(TOP_K_INDEX, "top_k_index")                                                \
  X(TOP_K_VALUE, "top_k_value")                                                \
  X(POOLED, "pooled")                                                          \
  X(ENTROPY, "entropy")                                                        \
  X(SINK, "sink")                                                              \
  X(DISTANCE, "distance")

typedef enum {
#define ATTN__FIELD_ENUM(name, spelling) ATTN_FIELD_##name,
  ATTN_FIELD_MAP(ATTN__FIELD_ENUM)
#undef ATTN__FIELD_ENUM
      ATTN_FIELD_COUNT
} attn_field_t;

#define ATTN_ERROR_FIELD_MAX 32
#define ATTN_ERROR_MESSAGE_MAX 256

typedef struct attn_error {
  int code;              /* 0 or an ATTN_E* value */
  attn_field_t field_id; /* offending input, ATTN_FIELD_NONE if none */
  char field[ATTN_ERROR_FIELD_MAX]; /* attn_field_name(field_id) */
  char message[ATTN_ERROR_MESSAGE_MAX];
} attn_error_t;

/* Static message for `code`, "unknown error" for anything else. */
const char *attn_strerror(int code);

/* Symbolic name for `code` ("EINVAL"...), "EUNKNOWN" for anything else. */
const char *attn_errname(int code);

/* Spelling of `f` as listed in ATTN_FIELD_MAP ("q_weight"...): "" for
 * ATTN_FIELD_NONE, "unknown" for anything out of range. Static string; any
 * thread. */
const char *attn_field_name(attn_field_t f);

#ifdef __cplusplus
}
#endif

#endif
