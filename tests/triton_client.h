/* tests/triton_client.h: an Open Inference Protocol client that writes and
 * reads HTTP exactly as tritonclient.http (Triton's Python client) does,
 * for the black-box tests of attnd's /v2 endpoints.
 *
 * What it reproduces, read from tritonclient's public source:
 *   - the request body is python-rapidjson's dumps of the dict tritonclient
 *     builds: compact JSON, keys in insertion order: "id" (when given),
 *     "inputs", "outputs" (when outputs are named), "parameters" (when not
 *     empty). An input is "name", "shape", "datatype", then "parameters"
 *     (when not empty: {"binary_data_size": n}), then "data" (a JSON input
 *     only). A named output is "name" and always "parameters":
 *     {"binary_data": true|false}. With no outputs named the request's
 *     parameters get "binary_data_output": true; custom parameters follow;
 *   - numbers as Python writes them (python-rapidjson dumps a float with
 *     Python's repr: the shortest digits that read back, "1.0", "1e-07",
 *     "1e+16"); a numpy array's tolist() widens float32 and float16 to
 *     double first, so float32 0.1 is 0.10000000149011612;
 *   - binary inputs: the JSON, then each binary input's raw little-endian
 *     bytes (numpy's tobytes()) in input order, with the header
 *     "inference-header-content-length: <JSON bytes>" (lower case, as
 *     tritonclient sends it), no Content-Type, a keep-alive connection;
 *     BF16 from float32 by dropping the low 16 bits, as tritonclient's
 *     serialize_bf16_tensor does; FP16 rounded to nearest even, as numpy's
 *     astype(np.float16);
 *   - compression: Content-Encoding gzip (gzip.compress) or deflate
 *     (zlib.compress: the zlib format); Accept-Encoding gzip or deflate;
 *   - the reply: a status other than 200 must carry {"error": "<string>"}
 *     (anything else there breaks tritonclient, as it breaks tc_infer); a
 *     200 is decompressed by its Content-Encoding (deflate as zlib.
 *     decompress reads it: the zlib format only), then split at
 *     Inference-Header-Content-Length (a length of the uncompressed JSON),
 *     and each binary output found by walking "outputs" in order, summing
 *     their binary_data_size.
 * Beyond tritonclient, for tests: raw deflate request bodies
 * (TC_RAW_DEFLATE), extra headers, and the body built without sending it.
 *
 * Every reply it reads is recorded as tests/server_harness.c records its
 * own (ATTND_TEST_REPLIES), after decompression, so that make check
 * validates them against docs/openapi.json too.
 *
 * No Check calls: functions return 0 or -1 with a message, so that threads
 * may use them. One tc_client_t per thread. */
#ifndef ATTND_TESTS_TRITON_CLIENT_H
#define ATTND_TESTS_TRITON_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The datatypes of the protocol that attnd takes. */
typedef enum tc_datatype {
  TC_BOOL,
  TC_INT32,
  TC_INT64,
  TC_FP16,
  TC_BF16,
  TC_FP32,
  TC_FP64
} tc_datatype_t;

/* "BOOL", "INT32", ... */
const char *tc_datatype_name(tc_datatype_t dt);

/* One InferInput. Owns raw and py (tc_input_free). */
typedef struct tc_input {
  char name[32];
  tc_datatype_t datatype;
  int rank;
  int64_t shape[8];
  int64_t n;          /* elements */
  int binary;         /* set_data_from_numpy(..., binary_data=True) */
  unsigned char *raw; /* the numpy array's bytes, little-endian */
  size_t raw_len;
  double *py; /* JSON only, or NULL: a Python list of floats given as the
                 data instead of an array's tolist() */
} tc_input_t;

/* The input's name, datatype and shape; no data yet (n from shape). */
void tc_input_init(tc_input_t *in, const char *name, tc_datatype_t dt, int rank,
                   const int64_t *shape);

/* Sets the data from a float32 array x[0..n), converted to the input's
 * float datatype as a numpy caller would (FP16 astype, BF16 tritonclient's
 * truncation, FP64 widening), sent as binary data or JSON. */
void tc_input_set_floats(tc_input_t *in, const float *x, int binary);
/* From doubles: an FP64 array (binary or tolist()), or for an FP32 input
 * with binary 0 a Python list of floats, printed as given ("0.1"). */
void tc_input_set_doubles(tc_input_t *in, const double *x, int binary);
/* From int64 values, as INT32 or INT64. */
void tc_input_set_ints(tc_input_t *in, const int64_t *x, int binary);
/* From bytes, nonzero true, as BOOL (one byte each, 0 or 1). */
void tc_input_set_bools(tc_input_t *in, const uint8_t *x, int binary);

/* Shortcuts: init, then set. */
void tc_input_fp32(tc_input_t *in, const char *name, int rank,
                   const int64_t *shape, const float *x, int binary);
void tc_input_ints(tc_input_t *in, const char *name, tc_datatype_t dt, int rank,
                   const int64_t *shape, const int64_t *x, int binary);
void tc_input_bools(tc_input_t *in, const char *name, int rank,
                    const int64_t *shape, const uint8_t *x, int binary);

/* The input's elements as float32, as attnd converts them (FP16 and BF16
 * exactly, FP64 rounded to nearest): out[0..n). Float inputs only. */
void tc_input_as_f32(const tc_input_t *in, float *out);

void tc_input_free(tc_input_t *in);

/* One InferRequestedOutput(name, binary_data). */
typedef struct tc_output {
  const char *name;
  int binary;
} tc_output_t;

/* One custom request parameter, as its Python value. */
typedef enum { TC_P_BOOL, TC_P_INT, TC_P_FLOAT, TC_P_STRING } tc_param_type_t;
typedef struct tc_param {
  const char *key;
  tc_param_type_t type;
  int64_t i; /* TC_P_BOOL (0 or 1), TC_P_INT */
  double f;  /* TC_P_FLOAT */
  const char *s;
} tc_param_t;

#define TC_PBOOL(k, v) ((tc_param_t){.key = (k), .type = TC_P_BOOL, .i = (v)})
#define TC_PINT(k, v) ((tc_param_t){.key = (k), .type = TC_P_INT, .i = (v)})
#define TC_PFLOAT(k, v) ((tc_param_t){.key = (k), .type = TC_P_FLOAT, .f = (v)})
#define TC_PSTR(k, v) ((tc_param_t){.key = (k), .type = TC_P_STRING, .s = (v)})

/* Content codings. TC_RAW_DEFLATE (a raw RFC 1951 stream under the name
 * deflate) is not tritonclient's; some clients send it. */
typedef enum tc_coding {
  TC_IDENTITY,
  TC_GZIP,
  TC_DEFLATE,
  TC_RAW_DEFLATE
} tc_coding_t;

typedef struct tc_options {
  const char *request_id;    /* NULL or "": none */
  const char *model_version; /* NULL or "": /v2/models/{m}/infer */
  tc_coding_t request_compression;
  tc_coding_t response_compression; /* Accept-Encoding; RAW is deflate */
  const char *const *headers;       /* extra "Name: value", NULL-ended */
  long timeout_ms;                  /* the exchange; 0: 30000 */
} tc_options_t;

/* The request, as tritonclient's _get_inference_request builds it: the
 * body (JSON, then the binary inputs' bytes) into *body (malloc'd,
 * NUL-terminated after len bytes), its length, and the JSON's length in
 * *json_len (-1 when no input is binary: no header is sent). Returns 0,
 * or -1 when out of memory. */
int tc_request_body(const tc_input_t *inputs, size_t n_inputs,
                    const tc_output_t *outputs, size_t n_outputs,
                    const tc_param_t *params, size_t n_params,
                    const char *request_id, char **body, size_t *len,
                    long *json_len);

/* A double as Python's repr writes it (what python-rapidjson dumps):
 * buf of at least 32 bytes. Returns the length. */
size_t tc_format_double(double x, char *buf);

/* One reply. Owns its buffers: tc_result_free. */
typedef struct tc_result {
  long status;      /* 0 when no HTTP reply came */
  char error[1024]; /* tc_infer's failure: the server's "error" string, or
                       why the reply could not be read */
  char *head;       /* the reply's header lines */
  size_t head_len;
  unsigned char *wire; /* the body as it came (maybe compressed) */
  size_t wire_len;
  unsigned char *body; /* decompressed */
  size_t body_len;
  long header_length; /* Inference-Header-Content-Length, or -1 */
  json_t *json;       /* the reply's JSON (the header of a binary reply) */
} tc_result_t;

/* A keep-alive connection to 127.0.0.1:port. One thread at a time. */
typedef struct tc_client {
  void *curl;
  int port;
} tc_client_t;

void tc_client_init(tc_client_t *c, int port);
void tc_client_free(tc_client_t *c);

/* InferenceServerClient.infer: POSTs the request to /v2/models/{model}
 * [/versions/{v}]/infer and reads the reply. Returns 0 for a 200 whose
 * body reads as tritonclient reads it; -1 otherwise, with r->error: the
 * server's message for a status other than 200 whose body is
 * {"error": "<string>"}, or what broke. r->status, head and body are set
 * whenever a reply came. r must be freed either way. opt may be NULL. */
int tc_infer(tc_client_t *c, const char *model, const tc_input_t *inputs,
             size_t n_inputs, const tc_output_t *outputs, size_t n_outputs,
             const tc_param_t *params, size_t n_params, const tc_options_t *opt,
             tc_result_t *r);

/* InferResult.as_numpy(name) for an FP32, FP16 or BF16 output (the
 * last two widened to float32, exactly): its shape (rank, shape[8])
 * and a new array of its elements (*data, free()), from the binary data or
 * from "data"; *binary says which. Returns 0, or -1 with r->error (no such
 * output, a binary_data_size past the body, data of the wrong count). */
int tc_result_output(tc_result_t *r, const char *name, int *rank,
                     int64_t *shape, float **data, int *binary);

/* The value of the reply's header `name` (case-insensitive) in buf; NULL
 * when absent. */
const char *tc_result_header(const tc_result_t *r, const char *name, char *buf,
                             size_t n);

void tc_result_free(tc_result_t *r);

/* Compresses in[0..n) in `coding` (not identity) into a new buffer *out of
 * *out_len bytes. Returns 0, or -1. */
int tc_compress(tc_coding_t coding, const void *in, size_t n,
                unsigned char **out, size_t *out_len);

/* Inflates in[0..n): gzip, deflate in the zlib format alone (as
 * zlib.decompress), or raw deflate. Returns 0 with a new buffer, or -1
 * (not of the coding, or cut short). */
int tc_decompress(tc_coding_t coding, const void *in, size_t n,
                  unsigned char **out, size_t *out_len);

#endif
