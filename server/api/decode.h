/* server/api/decode.h: what the request decoder's two files share (decode.c
 * reads the request's members, decode_tensor.c its tensors). Internal to
 * decoding; HTTP thread. */
#ifndef ATTND_DECODE_H
#define ATTND_DECODE_H

#include <jansson.h>

#include "codec/bulk.h"
#include "model/layers.h"
#include "sched/budget.h"
#include "sched/request.h"
#include "store/session.h"

/* What the fast path lifts out of jansson's way: every array of numbers
 * under a tensor's member, however short (MIN_ELEMS), and strings of at
 * least MIN_STRING characters. Short arrays too, since jansson builds a
 * tree node for each number and the decoder then walks them one by one: a
 * body of 60 numbers (15 x 4) that jansson read whole took 16.3 us to
 * decode, and 2.5 us lifted. */
#define ATTND_BULK_MIN_ELEMS 1
#define ATTND_BULK_MIN_STRING 1024

/* The first keys the "sink" statistic sums where a request names no
 * count: /v1's return.weights.sink_tokens and /v2's weights_sink_tokens
 * (docs/api.md and docs/oip.md give it; check_decode holds them to it). */
#define ATTND_SINK_TOKENS_DEFAULT 4

/* The decoder's state for one request body. */
typedef struct dec {
  attnd_request_t *req;
  const attnd_config_t *cfg;
  attnd_error_t *err;
  attnd_form_t query_form;
  attnd_bulk_set_t *bulk;    /* the fast path's items, or NULL */
  attnd_layer_set_t *layers; /* the layers a request may name, or NULL */
  const attnd_session_shape_t *step; /* a session's step: its shape */
  int planning;   /* errors from here on do not depend on the path taken */
  int unsure;     /* the error may read otherwise on the slow path */
  int core_names; /* the core's messages keep its names of the fields: /v2's
                     inputs are named as the core names them */
} dec_t;

/* Element kinds: float32, or boolean as uint8. */
enum { K_FLOAT, K_MASK };

/* Sets the error and returns -1. */
#define E(d, code, field, ...)                                                 \
  attnd_error_set((d)->err, code, field, __VA_ARGS__)
/* E for an error about a bulk item, whose words only the slow path has:
 * the request is decoded again that way. */
#define E_UNSURE(d, code, field, ...)                                          \
  ((d)->unsure = 1, E(d, code, field, __VA_ARGS__))

/* A new buffer of `bytes` that the request owns, or NULL. */
void *attnd__dec_alloc(dec_t *d, size_t bytes);
/* Makes the request own p (malloc'd, `bytes` long; steals it). Returns 0,
 * or -1 after freeing p. */
int attnd__dec_adopt(dec_t *d, void *p, size_t bytes);
/* The floats of array item b, made the request's: adopted from the set,
 * or, lent, already in the request's region (the set's arena was the
 * request's). NULL with out_of_memory for `field`. */
float *attnd__dec_take_floats(dec_t *d, attnd_bulk_t *b, const char *field);
/* A 53-bit nonce for the bulk scanner's placeholders, from a per-thread
 * generator seeded once from the OS. */
uint64_t attnd__dec_nonce(void);
/* The array item of d->bulk that placeholder v stands for, or NULL. */
attnd_bulk_t *attnd__dec_bulk_array(const dec_t *d, const json_t *v);
/* The index of the first value of x[0..n) that is not finite, or -1. Any
 * thread. */
int64_t attnd__dec_first_non_finite(const float *x, int64_t n);
/* The out_of_memory error for `field`; returns -1. */
int attnd__dec_oom(dec_t *d, const char *field);
/* Picks one of `names` (NULL-terminated) for obj's string member `key`,
 * whose path is `field`: its index in *out, untouched when absent or
 * null. Returns 0, or -1 with err: invalid_type, or invalid_value listing
 * the names. Also for the sessions' control bodies (session_api.c). */
int attnd__dec_enum(attnd_error_t *err, const json_t *obj, const char *key,
                    const char *field, const char *const *names, int *out);
/* "an object", "a number", ...: how a message names v's type. */
const char *attnd__json_type(const json_t *v);
/* Rejects members of `obj` that are not in the NULL-terminated `known`;
 * `where` is obj's path ("" for the root). */
int attnd__dec_members(dec_t *d, const json_t *obj, const char *where,
                       const char *const *known);
/* How a message shows the number x, in buf (32 bytes): "%.9g", but a
 * number at or beyond ±ATTND_JSON_HUGE, where the parser puts a literal
 * beyond a double's range (bulk.h), as "at least 9e+307" (or "at most
 * -9e+307"), which is true of both. Returns buf. */
const char *attnd__dec_num(double x, char *buf);
/* Refuses a softcap x (the number as sent, finite in float32) that is not
 * above 0 once in float32, naming x as sent: a positive x below float32's
 * least value (1e-50) rounds to 0, which the core would call 0. Returns 0,
 * or -1 with invalid_value for `field`. */
int attnd__dec_softcap(dec_t *d, double x, const char *field);
/* Reads v, a member that holds an integer, into *out: a JSON integer, or a
 * number of integral value in another spelling (2.0, 2e0, and an integer
 * literal beyond int64, which the parser widened to a real). Answers
 * invalid_type for another type or a fractional number, and invalid_value,
 * naming the range, for a value outside [lo, hi] (int64's own included).
 * `path` names v in the message ("mask.key_lengths[2]"), `field` is the
 * error's field. */
int attnd__dec_int(dec_t *d, const json_t *v, const char *field,
                   const char *path, int64_t lo, int64_t hi, int64_t *out);
/* The element count of the shape dim[0..rank) (each at least 1) into *n.
 * Returns 1 when the product is past int64, with *n INT64_MAX (a message
 * then says "more than"), else 0. */
int attnd__dec_count(int rank, const int64_t *dim, int64_t *n);
/* An int64 tensor of rank 1 .. max_rank (at most 2) from nested arrays of
 * integers (or a bulk item of them) into t. */
int attnd__dec_int_tensor(dec_t *d, const json_t *v, const char *field,
                          int max_rank, attn_tensor_t *t);
/* A tensor in any of the three forms (or a bulk item), of element `kind`,
 * into t; `form` (may be NULL) says which form it came in. */
int attnd__dec_tensor(dec_t *d, const json_t *v, const char *field, int kind,
                      attn_tensor_t *t, attnd_form_t *form);

/* ---- the steps every protocol's decoder shares (decode.c; oip.c) ---- */

/* jansson's tree of text[0..len) with the decoder's flags (duplicate keys
 * refused, any value at the root), safe when memory runs out, reading
 * number literals past int64 or a double as numbers, and refusing a NUL
 * byte at its place: a new reference, or NULL with *oom set, or else the
 * error in `je`, as jansson words and places its own. */
json_t *attnd__dec_parse(const char *text, size_t len, json_error_t *je,
                         int *oom);
/* jansson's error for body[0..len) when the bulk scan of it (bulk, which
 * wrote skel) gave up on an array at a syntax error (bulk.h, fault): read
 * by jansson from the skeleton before that array and the body from the
 * error on, not through the array's numbers, with the line and column
 * (and position) of the body, as a parse of the whole body reports them.
 * jansson reads at most max_structure bytes outside lifted data. Returns
 * 1 with `je` set; 0 when there is no such fault or this cannot tell (an
 * error earlier in the skeleton, or past what jansson may read): the
 * caller goes on as without one; -1 with *oom set. */
int attnd__dec_fault(const char *body, size_t len, const attnd_bulk_set_t *bulk,
                     const attnd_buf_t *skel, int64_t max_structure,
                     json_error_t *je, int *oom);
/* Between these two, the jansson values this thread makes are taken from a
 * per-thread arena first and freed with it by _end: every tree made since
 * _begin must be freed (json_decref) before _end, on this thread, and none
 * may be kept. */
void attnd__dec_tree_begin(void);
/* From _begin to _end, what this thread allocates on the heap through
 * codec/mem.h counts in budget `b` (jansson's trees, the bulk scanner's
 * arrays, text buffers, and the decoded tensors, but those in the pinned
 * pool, which is out of the budget already): at its most, taken into *held
 * (the request's share, which the caller settles to the decoded request's
 * own, attnd_request_memory, or gives back), and an allocation that does
 * not fit fails as out of memory would (the parse or the decoding ends,
 * out_of_memory). _end returns 0, or the bytes the request's share would
 * have needed when the budget was short. HTTP thread. */
void attnd__dec_meter_begin(attnd_budget_t *b, int64_t *held);
int64_t attnd__dec_meter_end(void);
void attnd__dec_tree_end(void);
/* The bytes of a small body's skeleton, written on the decoder's stack
 * (attnd_buf_init_in); a bigger one moves to the heap. */
#define ATTND_DEC_SKELETON_INLINE 2048
/* The members a /v1 request's root may have, and a session step's; of
 * their mask, a step's mask, a mask's window, their return and its
 * weights object, of a request's projections, rope, its scaling and
 * positions, and of a tensor given as an object (NULL-terminated): what
 * their decoders take. check_decode
 * holds docs/api.md's, docs/layers.md's and docs/sessions.md's tables and
 * lists of members and docs/openapi.json's schemas of the requests to
 * them. */
extern const char *const attnd__dec_v1_members[];
extern const char *const attnd__dec_step_members[];
extern const char *const attnd__dec_mask_members[];
extern const char *const attnd__dec_step_mask_members[];
extern const char *const attnd__dec_window_members[];
extern const char *const attnd__dec_return_members[];
extern const char *const attnd__dec_weights_members[];
extern const char *const attnd__dec_projection_members[];
extern const char *const attnd__dec_rope_members[];
extern const char *const attnd__dec_rope_scaling_members[];
extern const char *const attnd__dec_positions_members[];
extern const char *const attnd__dec_tensor_members[];
/* The root of a request: an object of the `known` members alone (NULL-
 * terminated), its "id" (a string of at most ATTND_ID_MAX bytes, or absent
 * or null) copied into the request, first, before anything else can fail. */
int attnd__dec_root(dec_t *d, const json_t *root, const char *const *known);
/* Copies the id of j, a request whose decoding failed with err, into err
 * (has_id), before j is freed: its error reply and log line carry it, an
 * out_of_memory that the memory budget turns into its 429 or 422 too
 * (attnd_api_meter_end). None where j has none. Returns -1. Borrows both. */
int attnd__dec_keep_id(const attnd_request_t *j, attnd_error_t *err);
/* For a body that is not parsed (its parse ran out of memory, the memory
 * budget short while the scanner lifted its tensors, before the id was
 * read; or a session step refused before its body is read): the root
 * object's "id" member, found in the text body[0..len) in one pass that
 * skips every other member's value by its brackets and strings, copied
 * into err (has_id) where it is a string of at most ATTND_ID_MAX bytes.
 * Allocates only the id's own value, in the thread's arena. Borrows both;
 * HTTP thread. */
void attnd__dec_find_id(const char *body, size_t len, attnd_error_t *err);
/* Points the request at layer l: a reference to d->layers, the layer's
 * weights, biases and norms in params, its head dims, rope and default
 * causal alignment. */
void attnd__dec_use_layer(dec_t *d, const attnd_layer_t *l);
/* With a layer: query holds hidden states of the layer's width E, key of
 * Ek and value of Ev, each one given (shape_mismatch naming "query", "key"
 * or "value"); a cross-attention layer's key and value are required, as
 * they cannot default to the query (missing_field naming the member and
 * its width). */
int attnd__dec_layer_widths(dec_t *d);
/* attn_plan_init on the request's params, its errors in the API's codes,
 * the field named by its /v1 path (attnd_request_field_path); first the
 * configured limits on the batch, lengths and heads of the decoded
 * shapes, as attnd__dec_limits words them. */
int attnd__dec_plan(dec_t *d);
/* The configured limits on the planned request (batch, lengths, heads, the
 * reply's elements and bytes); fields are /v1 paths ("query", "key",
 * "num_heads", "return.weights", "return.head_outputs"). */
int attnd__dec_limits(dec_t *d);

#endif
