/* codec/bulk.c: the bulk scanner (the number literals jansson refuses are
 * rewritten in widen.c). See bulk.h. */
#include "bulk.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "mem.h"
#include "number.h"
#include "util.h"

_Thread_local uint64_t attnd__bulk_examined;

/* ---- the bulk scanner -------------------------------------------------------
 *
 * One pass of a JSON lexer copies the text to the skeleton. It only needs to
 * know where strings are and how deep the containers nest; at each '['
 * outside a string it tries to read a bulk array (bulk_try). If that fails,
 * the '[' is copied and lexing goes on right after it, so the arrays inside
 * get their own tries. A leaf is read by at most ATTND_BULK_MAX_RANK tries
 * (those of its nearest enclosing arrays; further ones stop at depth 5
 * before reaching it), so the scan is linear.
 *
 * A string is skipped by string_close, whose two searches (for the next
 * quote and for the next backslash) each move forward only, so a string
 * full of escapes costs what a plain one does.
 *
 * Why the skeleton parses exactly when the text does, to the same value: a
 * replaced array is a valid JSON array by jansson's own rules (the grammar
 * below, numbers that jansson accepts, true/false) and so is its
 * placeholder; a replaced string is a valid JSON string (only characters
 * and escapes that jansson accepts) and so is its placeholder. jansson's
 * parser state after either is the same, and all other bytes are the same.
 * The one global rule is jansson's depth limit, JSON_PARSER_MAX_DEPTH,
 * which counts every value, scalars included: a rank-r array inside d
 * containers reaches depth d + r + 1 and its placeholder only d + 2, so an
 * array is replaced only if d + r + 1 fits.
 *
 * Why no member but a tensor's "base64" ever sees a string placeholder: a
 * string is lifted as base64 data only as the value of a key spelled
 * "base64", which the decoder reads only as a tensor's base64 text (any
 * other use of such a member is an unknown member or a type error, and
 * those errors never show the value); every other lifted string is put
 * back into jansson's tree before the decoder looks at it. */

/* The closing quote of the string that opens at *open, or NULL if the text
 * ends first; sets *escapes if the string holds a backslash. Each byte is
 * examined at most twice: once by the search for a quote, once by the
 * search for a backslash, and both only move forward (a quote is searched
 * for again only after the one found turned out to be escaped). */
const char *attnd__string_close(const char *open, const char *end,
                                int *escapes) {
  const char *p = open + 1;
  const char *q = memchr(p, '"', (size_t)(end - p));
  ATTND__EXAMINED((q ? q + 1 : end) - p);
  *escapes = 0;
  for (;;) {
    const char *stop = q ? q : end, *bs = NULL, *c = p;
    /* escapes come in runs: a few bytes by hand before a call */
    for (; c < stop && c - p < 8 && !bs; c++)
      bs = *c == '\\' ? c : NULL;
    if (!bs && c < stop)
      bs = memchr(c, '\\', (size_t)(stop - c));
    ATTND__EXAMINED((bs ? bs + 1 : stop) - p);
    if (bs == NULL)
      return q;
    *escapes = 1;
    if (end - bs <= 2)
      return NULL; /* the escaped character is the text's last */
    p = bs + 2;
    if (q && p > q) { /* that quote was the escaped character */
      q = memchr(p, '"', (size_t)(end - p));
      ATTND__EXAMINED((q ? q + 1 : end) - p);
    }
  }
}

/* Whether s[0..n) is all printable ASCII (0x20..0x7e): sixteen bytes at
 * a time where SSE2 is (below), then eight at a time, where a byte is
 * flagged if its high bit is set (>= 0x80), if adding 1 to its low seven
 * bits carries into the high bit (0x7f), or if subtracting 0x20 borrows
 * (< 0x20; the borrow may flag a neighbour too, but only when some byte is
 * below 0x20 already). */
static int printable(const char *s, size_t n) {
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  uint64_t bad = 0;
  size_t i = 0;
#ifdef __SSE2__
  /* sixteen at a time first (base64 tensors are long strings): adding
   * 0x60 takes 0x20..0x7e to 0x80..0xde, the signed bytes -128..-34, and
   * every other byte above -34 */
  __m128i flag = _mm_setzero_si128();
  const __m128i shift = _mm_set1_epi8(0x60), top = _mm_set1_epi8(-34);
  for (; i + 16 <= n; i += 16) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
    flag = _mm_or_si128(flag, _mm_cmpgt_epi8(_mm_add_epi8(x, shift), top));
  }
  if (_mm_movemask_epi8(flag))
    return 0;
#endif
  for (; i + 8 <= n; i += 8) {
    uint64_t x, low;
    memcpy(&x, s + i, 8);
    low = x & ~highs;
    bad |= x | (low + ones) | ((x - 0x20 * ones) & ~x);
  }
  if (bad & highs)
    return 0;
  for (; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
      return 0;
  return 1;
}

/* Reusable storage for the leaves of the current try: `first` (the scan's,
 * on its stack) until it outgrows it, then the heap; and where a finished
 * array's leaves go when they fit (the set's arena, or NULL). */
#define SCRATCH_FIRST 1024
typedef struct scratch {
  float *x;
  size_t n, cap;
  float *first;
  attnd_arena_t *arena;
  int wide; /* a leaf read so far is an integer beyond int64 */
} scratch_t;

static int is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && is_ws(*p))
    p++;
  return p;
}

/* The helpers of a try that goes wrong: kept out of the loop's way, which
 * reads every leaf of every request (the loop ran 10% slower with them
 * inlined: codec-bench's JSON parse). */
#define COLD __attribute__((cold, noinline))

static int is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Whether jansson refuses the value that starts at p (ws skipped) in an
 * array, after its '[' (first) or after a ',': the end of the text, ']'
 * after a ',', a word other than true, false and null (jansson reads a
 * word as a run of letters), something like a number that does not start
 * as one (attnd_number_parse's -1: "-", "-Infinity", "."), or a character
 * that starts no JSON value. A string, an object, an array, a number of any
 * size and the three literals are JSON, so no fault here. */
COLD static int value_refused(const char *p, const char *end, int first) {
  if (p == end)
    return 1;
  if (*p == '"' || *p == '{' || *p == '[')
    return 0;
  if (*p == ']')
    return !first;
  if (is_alpha(*p)) {
    const char *q = p;
    while (q < end && is_alpha(*q))
      q++;
    ATTND__EXAMINED(q - p);
    size_t n = (size_t)(q - p);
    return !((n == 4 && memcmp(p, "true", 4) == 0) ||
             (n == 5 && memcmp(p, "false", 5) == 0) ||
             (n == 4 && memcmp(p, "null", 4) == 0));
  }
  if (*p == '-' || (*p >= '0' && *p <= '9')) {
    float v;
    const char *next;
    return attnd_number_parse(p, end, &v, &next) == -1;
  }
  return 1;
}

/* Whether the number literal p[0..next) is an integer beyond int64, which
 * jansson refuses ("too big integer"), so that it reads a text with one
 * only once the literal is widened (attnd_json_widen_numbers). */
COLD static int beyond_int64(const char *p, const char *next) {
  int neg = *p == '-';
  const char *d = p + neg;
  size_t nd = (size_t)(next - d);
  if (memchr(d, '.', nd) || memchr(d, 'e', nd) || memchr(d, 'E', nd))
    return 0;
  return nd > 19 ||
         (nd == 19 &&
          memcmp(d, neg ? "9223372036854775808" : "9223372036854775807", 19) >
              0);
}

/* Whether the value at p is a number or a literal (JSON, but no leaf of
 * the array: at another depth) that jansson reads and then meets a token
 * other than ',' or ']' (or the end): "[[1],2 3]". */
COLD static int junk_after(const char *p, const char *end) {
  const char *q = p;
  float v;
  if (is_alpha(*p)) {
    while (q < end && is_alpha(*q))
      q++;
  } else if (attnd_number_parse(p, end, &v, &q) == -1) {
    return 0; /* a string, an object, an array */
  }
  ATTND__EXAMINED(q - p);
  const char *r = skip_ws(q, end);
  ATTND__EXAMINED(r - q);
  return r == end || (*r != ',' && *r != ']');
}

/* The start of the leaf (a number, true or false) that ends where the
 * white space before p starts, when what is there is one, or NULL (a ']'):
 * a leaf follows a '[', a ',' or white space, all after `start`. */
COLD static const char *leaf_before(const char *start, const char *p) {
  while (p > start && is_ws(p[-1]))
    p--;
  if (p > start && p[-1] == ']')
    return NULL;
  while (p > start && p[-1] != ',' && p[-1] != '[' && !is_ws(p[-1]))
    p--;
  return p;
}

/* Writes into fill (16 bytes, NUL-terminated) the shortest JSON text that
 * leaves jansson's parser as a rectangular array's text does at a point in
 * it: `level` arrays open, each outer one after a ',' when it already has
 * elements (len[l]), the innermost after `prior` elements and, with
 * `after`, right after its last one (no ',' yet). Every value is a 0. */
COLD static void fault_fill(char *fill, const int64_t *len, int level,
                            int64_t prior, int after) {
  char *f = fill;
  for (int l = 1; l <= level; l++) {
    int64_t k = l < level ? len[l] : prior;
    *f++ = '[';
    if (k > 0 || (l == level && after))
      *f++ = '0';
    if (k > 0 && !(l == level && after))
      *f++ = ',';
  }
  *f = '\0';
}

/* Reads the array at p (*p == '['): a rectangular array of rank at most
 * max_rank whose leaves are all numbers or all true/false, with at least
 * min_elems of them. On success returns the first character after it and
 * fills *item, which takes the scratch's storage. Otherwise returns NULL,
 * with *oom set if the scratch could not grow. Either way *stop is where
 * reading stopped.
 *
 * len[l] counts the elements of the open array at level l (1-based); dim[l-1]
 * is the length every array at level l must have, 0 until the first of them
 * closes. The first leaf fixes the rank: every leaf must be that deep.
 *
 * When reading stopped at a token that jansson refuses where it stands (a
 * syntax error, bulk.h's fault), *fault is the start of the token jansson
 * reads there (the last leaf, when what follows may be glued to it: "1e",
 * "01") and `fill` the text that leaves jansson's parser where the array's
 * text before *fault does (fault_fill); else *fault is NULL. */
#define TRY_FAIL return (*stop = p, NULL)
#define TRY_FAULT(at, lvl, prior, after)                                       \
  return (*fault = (at), fault_fill(fill, len, lvl, prior, after), *stop = p,  \
          NULL)
static const char *bulk_try(const char *p, const char *end, int max_rank,
                            size_t min_elems, scratch_t *sc, attnd_bulk_t *item,
                            int *oom, const char **stop, const char **fault,
                            char *fill) {
  int64_t len[ATTND_BULK_MAX_RANK + 1], dim[ATTND_BULK_MAX_RANK] = {0};
  int level = 0, rank = 0, is_bool = -1;
  const char *start = p;
  const char *wide_leaf = NULL; /* the leaf that may have set sc->wide */
  sc->n = 0;
  *fault = NULL;
  for (;;) {
    /* a value: open arrays down to a leaf */
    while (*p == '[') {
      if (++level > max_rank || (rank && level > rank))
        TRY_FAIL;
      len[level] = 0;
      p = skip_ws(p + 1, end);
      if (p == end)
        TRY_FAULT(p, level, 0, 0);
    }
    if (!rank)
      rank = level;
    else if (level != rank)
      goto no_leaf;

    /* the leaf */
    float v;
    int leaf_bool;
    const char *next;
    if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
      v = 1.0f, leaf_bool = 1, p += 4;
    } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
      v = 0.0f, leaf_bool = 1, p += 5;
    } else if (attnd_number_parse(p, end, &v, &next) == 0) {
      if (next - p == 2 && *p == '-' && v == 0)
        v = 0.0f; /* jansson reads the integer -0 as 0 */
      if (next - p >= 19 && !sc->wide) {
        wide_leaf = p;
        sc->wide = beyond_int64(p, next);
      }
      leaf_bool = 0;
      p = next;
    } else {
    no_leaf: /* no leaf here: a syntax error, or JSON that is no tensor */
      if (value_refused(p, end, len[level] == 0) || junk_after(p, end))
        TRY_FAULT(p, level, len[level], 0);
      TRY_FAIL;
    }
    if (is_bool != leaf_bool) {
      if (is_bool >= 0)
        TRY_FAIL; /* numbers and booleans mixed */
      is_bool = leaf_bool;
    }
    if (sc->n == sc->cap) {
      size_t cap = 2 * sc->cap;
      int first = sc->x == sc->first;
      float *x = cap <= SIZE_MAX / sizeof *x
                     ? attnd_mem_realloc(first ? NULL : sc->x, cap * sizeof *x)
                     : NULL;
      if (!x) {
        *oom = 1;
        TRY_FAIL;
      }
      if (first)
        memcpy(x, sc->x, sc->n * sizeof *x);
      sc->x = x;
      sc->cap = cap;
    }
    sc->x[sc->n++] = v;
    len[level]++;

    /* after a value: ',' leads to the next one, ']' closes an array;
     * anything else is a syntax error, read again from the last leaf
     * when it is the value just read (leaf_before) */
    for (;;) {
      p = skip_ws(p, end);
      if (p == end || (*p != ',' && *p != ']')) {
        const char *leaf = leaf_before(start, p);
        if (leaf) { /* jansson reads that leaf again */
          if (leaf == wide_leaf)
            sc->wide = 0;
          TRY_FAULT(leaf, level, len[level] - 1, 0);
        }
        TRY_FAULT(p, level, len[level], 1);
      }
      if (*p == ',') {
        p = skip_ws(p + 1, end);
        if (p == end)
          TRY_FAULT(p, level, len[level], 0);
        break;
      }
      p++;
      if (!dim[level - 1])
        dim[level - 1] = len[level];
      else if (dim[level - 1] != len[level])
        TRY_FAIL; /* ragged */
      if (--level == 0)
        goto done;
      len[level]++;
    }
  }

done:
  *stop = p;
  if (sc->n < min_elems)
    return NULL;
  item->n = sc->n;
  item->copy = NULL;
  item->rank = rank;
  memset(item->dim, 0, sizeof item->dim);
  memcpy(item->dim, dim, (size_t)rank * sizeof *dim);
  item->is_bool = is_bool;
  item->text = NULL;
  item->text_len = 0;
  item->in_tree = 0;
  size_t bytes = sc->n * sizeof *sc->x;
  item->data = sc->arena ? attnd_arena_alloc(sc->arena, bytes) : NULL;
  item->lent = item->data != NULL;
  if (item->data || sc->x == sc->first) { /* a copy; the scratch stays */
    if (!item->data && (item->data = attnd_mem_alloc(bytes)) == NULL) {
      *oom = 1;
      TRY_FAIL;
    }
    memcpy(item->data, sc->x, bytes);
  } else { /* the scratch's heap storage, shrunk, and a new scratch */
    item->data = attnd_mem_realloc(sc->x, bytes);
    if (!item->data)
      item->data = sc->x;
    sc->x = sc->first;
    sc->cap = SCRATCH_FIRST;
  }
  sc->n = 0;
  return p;
}
#undef TRY_FAIL
#undef TRY_FAULT

void attnd_bulk_set_init(attnd_bulk_set_t *set, uint64_t nonce) {
  set->items = NULL;
  set->n = set->cap = set->n_data = set->lifted_bytes = 0;
  set->fault = SIZE_MAX;
  set->fault_array = set->fault_skel = set->fault_lifted = 0;
  set->fault_wide = 0;
  set->fault_fill[0] = '\0';
  set->nonce = nonce;
  set->array_keys = NULL;
  set->arena = NULL;
}

/* Whether p is in the set's arena. */
static int in_arena(const attnd_bulk_set_t *set, const void *p) {
  return set->arena && attnd_arena_owns(set->arena, p);
}

/* Whether the string s[0..n) (between its quotes) is spelled as one of the
 * NULL-terminated keys. */
static int is_key_of(const char *s, size_t n, const char *const *keys) {
  for (; *keys; keys++)
    if (strlen(*keys) == n && memcmp(s, *keys, n) == 0)
      return 1;
  return 0;
}

static int is_digit(char c) {
  return c >= '0' && c <= '9';
}

/* The decimal at *s (digits, as bulk_add writes them: no sign, no leading
 * zero but in "0") into *v, moving *s past it; -1 where there is none or it
 * is over UINT64_MAX. Not sscanf: the decoder reads every string through
 * here, and printf's family is slow in attnd (codec/util.h). */
static int placeholder_number(const char **s, uint64_t *v) {
  const char *p = *s;
  uint64_t x = 0;
  if (!is_digit(*p) || (*p == '0' && is_digit(p[1])))
    return -1;
  for (; is_digit(*p); p++) {
    uint64_t digit = (uint64_t)(*p - '0');
    if (x > UINT64_MAX / 10 || x * 10 > UINT64_MAX - digit)
      return -1;
    x = x * 10 + digit;
  }
  *s = p;
  *v = x;
  return 0;
}

const attnd_bulk_t *attnd_bulk_string(const attnd_bulk_set_t *set,
                                      const char *s) {
  uint64_t nonce, idx;
  if (strncmp(s, "\001bulk:", 6) != 0)
    return NULL;
  s += 6;
  if (placeholder_number(&s, &nonce) < 0 || *s++ != ':' ||
      placeholder_number(&s, &idx) < 0 || *s != 0 || nonce != set->nonce ||
      idx >= set->n || set->items[idx].text == NULL)
    return NULL;
  return &set->items[idx];
}

void attnd_bulk_set_free(attnd_bulk_set_t *set) {
  for (size_t i = 0; i < set->n; i++) {
    if (!set->items[i].lent)
      attnd_mem_free(set->items[i].data);
    attnd_mem_free(set->items[i].copy);
  }
  if (!in_arena(set, set->items))
    attnd_mem_free(set->items);
  attnd_arena_t *arena = set->arena;
  attnd_bulk_set_init(set, set->nonce);
  set->arena = arena;
}

/* Adds *item, which stands for `span` bytes of the text, to the set and
 * appends its placeholder to the skeleton: the array placeholder, or for a
 * string item the string placeholder. On failure frees the item's data and
 * copy. Returns 0 or -1. */
static int bulk_add(attnd_bulk_set_t *set, attnd_bulk_t *item, const char *src,
                    size_t span, attnd_buf_t *skel) {
  if (set->n == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 8;
    attnd_bulk_t *items =
        set->arena ? attnd_arena_alloc(set->arena, cap * sizeof *items) : NULL;
    if (items == NULL && cap <= SIZE_MAX / sizeof *items)
      items = attnd_mem_alloc(cap * sizeof *items);
    if (!items) {
      if (!item->lent)
        attnd_mem_free(item->data);
      attnd_mem_free(item->copy);
      return -1;
    }
    if (set->n)
      memcpy(items, set->items, set->n * sizeof *items);
    if (!in_arena(set, set->items))
      attnd_mem_free(set->items);
    set->items = items;
    set->cap = cap;
  }
  /* "\"\\u0001bulk:<nonce>:<k>\"" or "[\"\\u0001bulk\",<nonce>,<k>]" */
  char text[80];
  const char *head = item->text ? "\"\\u0001bulk:" : "[\"\\u0001bulk\",";
  size_t len = strlen(head);
  memcpy(text, head, len);
  len += attnd_fmt_i64(text + len, (int64_t)set->nonce);
  text[len++] = item->text ? ':' : ',';
  len += attnd_fmt_i64(text + len, (int64_t)set->n);
  text[len++] = item->text ? '"' : ']';
  item->src = src;
  item->src_len = span;
  set->items[set->n++] = *item;
  set->n_data += !item->in_tree;
  set->lifted_bytes += span;
  attnd_buf_append(skel, text, len);
  return skel->oom ? -1 : 0;
}

/* The string item for the characters s[0..n) of a string (between its
 * quotes), when it is printable ASCII with only the escapes bulk.h allows
 * and at least min_string characters once unescaped. Returns 1 and fills
 * *item (text borrowed from s, or a copy it owns); 0 when the string does
 * not qualify; -1 when out of memory. Linear: the unescaping copies spans
 * between backslashes. */
static int string_item(const char *s, size_t n, int escapes, size_t min_string,
                       attnd_bulk_t *item) {
  memset(item, 0, sizeof *item);
  if (n < min_string)
    return 0;
  if (!escapes) {
    ATTND__EXAMINED(n);
    if (!printable(s, n))
      return 0;
    item->text = s;
    item->text_len = n;
    return 1;
  }
  char *out = attnd_mem_alloc(n ? n : 1), *o = out;
  if (!out)
    return -1;
  const char *p = s, *end = s + n;
  while (p < end) {
    const char *bs = memchr(p, '\\', (size_t)(end - p));
    const char *stop = bs ? bs : end;
    ATTND__EXAMINED(stop - p);
    if (!printable(p, (size_t)(stop - p)))
      goto no;
    memcpy(o, p, (size_t)(stop - p));
    o += stop - p;
    if (!bs)
      break;
    if (end - bs < 2)
      goto no;
    char c = bs[1];
    p = bs + 2;
    if (c == '"' || c == '\\' || c == '/') {
      *o++ = c;
      continue;
    }
    /* \u00XX, XX a printable character; anything else is jansson's */
    if (c != 'u' || end - p < 4 || p[0] != '0' || p[1] != '0')
      goto no;
    int hi = attnd_hex_digit(p[2]), lo = attnd_hex_digit(p[3]);
    if (hi < 0 || lo < 0 || hi * 16 + lo < 0x20 || hi * 16 + lo > 0x7e)
      goto no;
    *o++ = (char)(hi * 16 + lo);
    p += 4;
  }
  if ((size_t)(o - out) < min_string)
    goto no;
  item->copy = out;
  item->text = out;
  item->text_len = (size_t)(o - out);
  return 1;
no:
  attnd_mem_free(out);
  return 0;
}

/* The length of the UTF-8 sequence at p (before end) if it is one that
 * jansson accepts (shortest form, no surrogate, at most U+10FFFF), else 0. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end) {
  unsigned char c = p[0];
  size_t n = c < 0x80   ? 1
             : c < 0xc2 ? 0
             : c < 0xe0 ? 2
             : c < 0xf0 ? 3
             : c < 0xf5 ? 4
                        : 0;
  if (n == 0 || (size_t)(end - p) < n)
    return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) ||
      (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] > 0x8f))
    return 0; /* overlong, a surrogate, or beyond U+10FFFF */
  return n;
}

/* The value of the four hex digits at p (before end), or -1. */
static long hex4(const char *p, const char *end) {
  if (end - p < 4)
    return -1;
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int h = attnd_hex_digit(p[i]);
    if (h < 0)
      return -1;
    v = v * 16 + h;
  }
  return v;
}

/* The string item (in_tree) for the characters s[0..n) of a string
 * between its quotes, when jansson accepts it (bulk.h), unescaped to UTF-8
 * into a copy the item owns. Returns 1, 0 when the string does not
 * qualify (jansson will find the fault), or -1 when out of memory.
 * Linear: every byte is read once. */
static int text_item(const char *s, size_t n, attnd_bulk_t *item) {
  memset(item, 0, sizeof *item);
  char *out = attnd_mem_alloc(n ? n : 1), *o = out; /* unescaping never grows */
  if (!out)
    return -1;
  const char *p = s, *end = s + n;
  ATTND__EXAMINED(n);
  while (p < end) {
    unsigned char c = (unsigned char)*p;
    if (c >= 0x20 && c < 0x80 && c != '\\') {
      *o++ = (char)c;
      p++;
      continue;
    }
    if (c >= 0x80) {
      size_t k = utf8_seq((const unsigned char *)p, (const unsigned char *)end);
      if (k == 0)
        goto no;
      memcpy(o, p, k);
      o += k, p += k;
      continue;
    }
    if (c != '\\' || end - p < 2)
      goto no; /* a control character, or a lone backslash */
    static const char esc[] = "\"\\/bfnrt", val[] = "\"\\/\b\f\n\r\t";
    const char *e = p[1] ? memchr(esc, p[1], sizeof esc - 1) : NULL;
    if (e) {
      *o++ = val[e - esc];
      p += 2;
      continue;
    }
    if (p[1] != 'u')
      goto no;
    long u = hex4(p + 2, end);
    p += 6;
    if (u >= 0xd800 && u <= 0xdbff) { /* a high surrogate: its low one */
      long lo =
          end - p >= 2 && p[0] == '\\' && p[1] == 'u' ? hex4(p + 2, end) : -1;
      if (lo < 0xdc00 || lo > 0xdfff)
        goto no;
      u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
      p += 6;
    } else if (u <= 0 || (u >= 0xdc00 && u <= 0xdfff)) {
      goto no; /* not hex, \u0000, or a lone low surrogate */
    }
    if (u < 0x80) {
      *o++ = (char)u;
    } else if (u < 0x800) {
      *o++ = (char)(0xc0 | u >> 6);
      *o++ = (char)(0x80 | (u & 0x3f));
    } else if (u < 0x10000) {
      *o++ = (char)(0xe0 | u >> 12);
      *o++ = (char)(0x80 | (u >> 6 & 0x3f));
      *o++ = (char)(0x80 | (u & 0x3f));
    } else {
      *o++ = (char)(0xf0 | u >> 18);
      *o++ = (char)(0x80 | (u >> 12 & 0x3f));
      *o++ = (char)(0x80 | (u >> 6 & 0x3f));
      *o++ = (char)(0x80 | (u & 0x3f));
    }
  }
  item->copy = out;
  item->text = out;
  item->text_len = (size_t)(o - out);
  item->in_tree = 1;
  return 1;
no:
  attnd_mem_free(out);
  return 0;
}

int attnd_bulk_ints(const attnd_bulk_t *b, int64_t *out) {
  const char *p = b->src, *end = b->src + b->src_len;
  size_t k = 0;
  if (b->text || b->is_bool)
    return -1;
  while (p < end) {
    if (*p == '[' || *p == ']' || *p == ',' || is_ws(*p)) {
      p++;
      continue;
    }
    const char *tok = p;
    int real = 0;
    while (p < end && *p && strchr("0123456789+-.eE", *p)) {
      real |= *p == '.' || *p == 'e' || *p == 'E';
      p++;
    }
    if (k == b->n || p == tok)
      return -1;
    char buf[32];
    size_t len = (size_t)(p - tok);
    if (!real) { /* an integer literal: exactly, or beyond int64 */
      int neg = *tok == '-';
      uint64_t v = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
      for (const char *d = tok + neg; d < p; d++) {
        if (v > (lim - (uint64_t)(*d - '0')) / 10)
          return -1;
        v = v * 10 + (uint64_t)(*d - '0');
      }
      out[k++] = neg ? (int64_t)(0 - v) : (int64_t)v;
      continue;
    }
    if (len >= sizeof buf)
      return -1; /* a real of 32 characters or more: the slow path */
    memcpy(buf, tok, len);
    buf[len] = 0;
    double x = strtod(buf, NULL);
    if (!(x == floor(x) && x >= -9223372036854775808.0 &&
          x < 9223372036854775808.0))
      return -1;
    out[k++] = (int64_t)x;
  }
  return k == b->n ? 0 : -1;
}

int attnd_bulk_scan(const char *src, size_t n, size_t min_elems,
                    size_t min_string, attnd_bulk_set_t *set,
                    attnd_buf_t *skeleton) {
  const char *p = src, *end = src + n;
  const char *copied = src; /* src[copied..p) is still to be copied */
  size_t depth = 0;         /* containers open at p */
  /* What the last tokens were: a key string, then ':' */
  enum {
    K_NONE,
    K_BASE64,
    K_BASE64_COLON,
    K_ARRAY,
    K_ARRAY_COLON
  } key = K_NONE;
  float first[SCRATCH_FIRST];
  scratch_t sc = {first, 0, SCRATCH_FIRST, first, set->arena, 0};
  int oom = 0;
  ATTND__EXAMINED(n); /* the main pass */
  while (p < end && !oom) {
    switch (*p) {
    case '"': { /* a string: skip to its closing quote */
      const char *open = p;
      int escapes, is_base64 = key == K_BASE64_COLON;
      const char *close = attnd__string_close(open, end, &escapes);
      p = close ? close + 1 : end;
      size_t slen = close ? (size_t)(close - open - 1) : 0;
      key = !close || escapes                                 ? K_NONE
            : slen == 6 && memcmp(open + 1, "base64", 6) == 0 ? K_BASE64
            : set->array_keys && slen <= 32 &&
                    is_key_of(open + 1, slen, set->array_keys)
                ? K_ARRAY
                : K_NONE;
      attnd_bulk_t item;
      int r = 0;
      if (close && min_string && slen >= min_string) {
        if (is_base64)
          r = string_item(open + 1, slen, escapes, min_string, &item);
        if (r == 0) { /* any other string that is no key */
          const char *after = skip_ws(p, end);
          ATTND__EXAMINED(after - p);
          if (after == end || *after != ':')
            r = text_item(open + 1, slen, &item);
        }
      }
      if (r > 0) {
        attnd_buf_append(skeleton, copied, (size_t)(open - copied));
        oom = bulk_add(set, &item, open, (size_t)(p - open), skeleton) < 0;
        copied = p;
      }
      oom |= r < 0;
      break;
    }
    case '[': {
      attnd_bulk_t item;
      const char *after = NULL, *stop = p, *fault = NULL;
      char fill[sizeof set->fault_fill];
      if (depth + 2 <= JSON_PARSER_MAX_DEPTH &&
          (set->array_keys == NULL || key == K_ARRAY_COLON)) {
        size_t room = JSON_PARSER_MAX_DEPTH - 1 - depth; /* ranks that fit */
        int max_rank =
            room < ATTND_BULK_MAX_RANK ? (int)room : ATTND_BULK_MAX_RANK;
        after = bulk_try(p, end, max_rank, min_elems, &sc, &item, &oom, &stop,
                         &fault, fill);
      }
      ATTND__EXAMINED(stop - p);
      if (fault && set->fault == SIZE_MAX) { /* the first one */
        set->fault = (size_t)(fault - src);
        set->fault_array = (size_t)(p - src);
        set->fault_skel = skeleton->len + (size_t)(p - copied);
        set->fault_lifted = set->lifted_bytes;
        set->fault_wide = sc.wide;
        memcpy(set->fault_fill, fill, sizeof fill);
      }
      key = K_NONE;
      if (after) {
        attnd_buf_append(skeleton, copied, (size_t)(p - copied));
        oom = bulk_add(set, &item, p, (size_t)(after - p), skeleton) < 0;
        p = copied = after;
      } else {
        depth++;
        p++;
      }
      break;
    }
    case '{':
      depth++;
      p++;
      key = K_NONE;
      break;
    case ']':
    case '}':
      depth -= depth > 0;
      p++;
      key = K_NONE;
      break;
    case ':':
      key = key == K_BASE64  ? K_BASE64_COLON
            : key == K_ARRAY ? K_ARRAY_COLON
                             : K_NONE;
      p++;
      break;
    default:
      if (!is_ws(*p))
        key = K_NONE;
      p++;
    }
  }
  if (sc.x != sc.first)
    attnd_mem_free(sc.x);
  if (!oom) {
    attnd_buf_append(skeleton, copied, (size_t)(p - copied));
    oom = skeleton->oom;
  }
  return oom ? -1 : 0;
}
