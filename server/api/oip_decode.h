/* server/api/oip_decode.h: what the Open Inference Protocol's decoder
 * shares between its two files: oip.c (the model, the parameters, the
 * outputs, the request) and oip_inputs.c (each input's header and data,
 * in JSON or as binary tensor data). Internal to server/api/. */
#ifndef ATTND_OIP_DECODE_H
#define ATTND_OIP_DECODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "api/decode.h"
#include "api/oip.h"

/* The datatypes attnd takes. */
typedef enum {
  DT_FP32,
  DT_FP16,
  DT_BF16,
  DT_FP64,
  DT_INT32,
  DT_INT64,
  DT_BOOL,
  DT_COUNT
} dtype_t;
extern const char *const attnd__oip_dtypes[DT_COUNT + 1];

/* What an input holds once decoded, as the core takes it: float32, int64
 * or uint8 (0 or 1). */
typedef enum { EL_FLOAT, EL_INT, EL_BOOL } elem_t;
extern const size_t attnd__oip_elem_size[];
/* The datatypes each kind is sent in, as bits (1 << dtype_t). */
extern const unsigned attnd__oip_elem_dtypes[];

/* The inputs: the name, which is also attn_params_t's member; the /v1 path
 * of that member, which the shared steps' errors name; what it holds; and
 * whether only the generic model takes it. */
typedef struct input_def {
  const char *name, *v1;
  elem_t elem;
  int generic;
  int rank; /* in the model's metadata: the usual rank ("-1" each) */
  size_t off;
} input_def_t;

#define N_INPUTS 16
extern const input_def_t attnd__oip_inputs[N_INPUTS];

/* The request's parameters by name (oip.c's PARAM_MAP), NULL-terminated.
 * check_oip holds docs/oip.md's table of parameters and docs/openapi.json's
 * InferParameters to them. */
extern const char *const attnd__oip_params[];

/* The members the decoder takes, each list NULL-terminated; any other is
 * refused. The request's root (oip.c); each input (oip_inputs.c) and its
 * parameters; each requested output (oip.c) and its parameters. check_oip
 * holds docs/oip.md's table under "## The request" and docs/openapi.json's
 * InferRequest, InferInput and InferRequestedOutput to them. */
extern const char *const attnd__oip_request_members[];
extern const char *const attnd__oip_input_members[];
extern const char *const attnd__oip_input_param_members[];
extern const char *const attnd__oip_output_members[];
extern const char *const attnd__oip_output_param_members[];

/* The outputs, in the order of their ATTND_OIP_* bits. */
enum {
  O_OUTPUT,
  O_WEIGHTS,
  O_WEIGHTS_MEAN,
  O_HEAD_OUTPUTS,
  O_TOP_K_INDEX,
  O_TOP_K_VALUE,
  O_POOLED,
  O_ENTROPY,
  O_SINK,
  O_DISTANCE,
  N_OUTPUTS
};

typedef struct oip {
  dec_t d;
  const char *model;          /* as asked */
  const attnd_layer_t *layer; /* the layer model, or NULL for "attention" */
  int input_at[N_INPUTS];     /* each input's index in "inputs", or -1 */
  int output_at[N_OUTPUTS];   /* each output's index in "outputs", or -1 */
  unsigned params_given;      /* bits of param_t */
  int binary_all;             /* parameters.binary_data_output */
  int rope_style;             /* parameters.rope_style: 0 half, 1 interleaved */
  /* Triton's binary tensor data: the bytes after the JSON, taken by the
   * inputs with a binary_data_size in their order (bin_at so far); bin is
   * NULL when the request has no Inference-Header-Content-Length. */
  const unsigned char *bin;
  size_t bin_len, bin_at;
  /* The allocation that holds the body, which the request may take, so
   * that FP32 data 4-byte aligned in it is used where it lies (NULL when
   * the caller keeps it, or once the request has taken it). */
  void **own;
  size_t own_bytes;
  void *lent; /* *own as lent, so that a failed decode gives it back */
} oip_t;

/* One input's header: what the data must be. */
typedef struct oip_in {
  const input_def_t *def;
  dtype_t dtype;
  int rank;
  int64_t dim[ATTN_MAX_RANK];
  int64_t n;           /* elements */
  int64_t binary_size; /* parameters.binary_data_size, or -1 */
  char path[32];       /* "inputs[3]" */
  char shape[128];     /* "[2, 4]" */
} oip_in_t;

/* Sets invalid_type for member `field`, which is v, expected `what`. */
int attnd__oip_bad_type(oip_t *o, const char *field, const json_t *v,
                        const char *what);
/* Member `key` of obj, whose path is `path`, with its own path in field
 * (64 bytes): a value of JSON type `type`, which a message calls `what`.
 * NULL with missing_field (absent or null) or invalid_type set. */
const json_t *attnd__oip_need(oip_t *o, const json_t *obj, const char *path,
                              const char *key, char *field, json_type type,
                              const char *what);
/* The index of string v among names (NULL-terminated), or -1. */
int attnd__oip_find_name(const char *const *names, const char *v);

/* oip_inputs.c: the body's "inputs" array, each into its buffer. */
int attnd__oip_read_inputs(oip_t *o, const json_t *ins);

#endif
