/* server/codec/bulk.c: the bulk scanner. See bulk.h. */
#include "bulk.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "number.h"

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
 * Why the skeleton parses exactly when the text does, to the same value: a
 * replaced array is a valid JSON array by jansson's own rules (the grammar
 * below, numbers that jansson accepts, true/false) and so is its
 * placeholder; jansson's parser state after either is the same, and all
 * other bytes are the same. The one global rule is jansson's depth limit,
 * JSON_PARSER_MAX_DEPTH, which counts every value, scalars included: a
 * rank-r array inside d containers reaches depth d + r + 1 and its
 * placeholder only d + 2, so an array is replaced only if d + r + 1 fits. */

/* Whether s[0..n) is all printable ASCII (0x20..0x7e), eight bytes at a
 * time: a byte is flagged if its high bit is set (>= 0x80), if adding 1 to
 * its low seven bits carries into the high bit (0x7f), or if subtracting
 * 0x20 borrows (< 0x20; the borrow may flag a neighbour too, but only when
 * some byte is below 0x20 already). */
static int printable(const char *s, size_t n) {
  const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
  uint64_t bad = 0;
  size_t i = 0;
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

/* Reusable storage for the leaves of the current try. */
typedef struct scratch {
  float *x;
  size_t n, cap;
} scratch_t;

static int is_ws(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && is_ws(*p))
    p++;
  return p;
}

/* Reads the array at p (*p == '['): a rectangular array of rank at most
 * max_rank whose leaves are all numbers or all true/false, with at least
 * min_elems of them. On success returns the first character after it and
 * fills *item, which takes the scratch's storage. Otherwise returns NULL,
 * with *oom set if the scratch could not grow.
 *
 * len[l] counts the elements of the open array at level l (1-based); dim[l-1]
 * is the length every array at level l must have, 0 until the first of them
 * closes. The first leaf fixes the rank: every leaf must be that deep. */
static const char *bulk_try(const char *p, const char *end, int max_rank,
                            size_t min_elems, scratch_t *sc, attnd_bulk_t *item,
                            int *oom) {
  int64_t len[ATTND_BULK_MAX_RANK + 1], dim[ATTND_BULK_MAX_RANK] = {0};
  int level = 0, rank = 0, is_bool = -1;
  sc->n = 0;
  for (;;) {
    /* a value: open arrays down to a leaf */
    while (*p == '[') {
      if (++level > max_rank || (rank && level > rank))
        return NULL;
      len[level] = 0;
      p = skip_ws(p + 1, end);
      if (p == end)
        return NULL;
    }
    if (!rank)
      rank = level;
    else if (level != rank)
      return NULL;

    /* the leaf */
    float v;
    int leaf_bool;
    if (end - p >= 4 && memcmp(p, "true", 4) == 0) {
      v = 1.0f, leaf_bool = 1, p += 4;
    } else if (end - p >= 5 && memcmp(p, "false", 5) == 0) {
      v = 0.0f, leaf_bool = 1, p += 5;
    } else if (attnd_number_parse(p, end, &v, &p) == 0) {
      leaf_bool = 0;
    } else {
      return NULL;
    }
    if (is_bool != leaf_bool) {
      if (is_bool >= 0)
        return NULL; /* numbers and booleans mixed */
      is_bool = leaf_bool;
    }
    if (sc->n == sc->cap) {
      size_t cap = sc->cap ? 2 * sc->cap : 1024;
      float *x =
          cap <= SIZE_MAX / sizeof *x ? realloc(sc->x, cap * sizeof *x) : NULL;
      if (!x) {
        *oom = 1;
        return NULL;
      }
      sc->x = x;
      sc->cap = cap;
    }
    sc->x[sc->n++] = v;
    len[level]++;

    /* after a value: ',' leads to the next one, ']' closes an array */
    for (;;) {
      p = skip_ws(p, end);
      if (p == end)
        return NULL;
      if (*p == ',') {
        p = skip_ws(p + 1, end);
        if (p == end)
          return NULL;
        break;
      }
      if (*p != ']')
        return NULL;
      p++;
      if (!dim[level - 1])
        dim[level - 1] = len[level];
      else if (dim[level - 1] != len[level])
        return NULL; /* ragged */
      if (--level == 0)
        goto done;
      len[level]++;
    }
  }

done:
  if (sc->n < min_elems)
    return NULL;
  item->n = sc->n;
  item->rank = rank;
  memset(item->dim, 0, sizeof item->dim);
  memcpy(item->dim, dim, (size_t)rank * sizeof *dim);
  item->is_bool = is_bool;
  item->text = NULL;
  item->text_len = 0;
  item->data = realloc(sc->x, sc->n * sizeof *sc->x); /* shrink */
  if (!item->data)
    item->data = sc->x;
  sc->x = NULL;
  sc->n = sc->cap = 0;
  return p;
}

void attnd_bulk_set_init(attnd_bulk_set_t *set, uint64_t nonce) {
  set->items = NULL;
  set->n = set->cap = 0;
  set->nonce = nonce;
}

void attnd_bulk_set_free(attnd_bulk_set_t *set) {
  for (size_t i = 0; i < set->n; i++)
    free(set->items[i].data);
  free(set->items);
  attnd_bulk_set_init(set, set->nonce);
}

/* Adds *item to the set and appends its placeholder to the skeleton: the
 * array placeholder, or for a string item the string placeholder. On
 * failure frees the item's data. Returns 0 or -1. */
static int bulk_add(attnd_bulk_set_t *set, attnd_bulk_t *item,
                    attnd_buf_t *skel) {
  if (set->n == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 8;
    attnd_bulk_t *items = realloc(set->items, cap * sizeof *items);
    if (!items) {
      free(item->data);
      return -1;
    }
    set->items = items;
    set->cap = cap;
  }
  char text[80];
  int len = snprintf(
      text, sizeof text,
      item->text ? "\"\\u0001bulk:%llu:%llu\"" : "[\"\\u0001bulk\",%llu,%llu]",
      (unsigned long long)set->nonce, (unsigned long long)set->n);
  set->items[set->n++] = *item;
  attnd_buf_append(skel, text, (size_t)len);
  return skel->oom ? -1 : 0;
}

int attnd_bulk_scan(const char *src, size_t n, size_t min_elems,
                    size_t min_string, attnd_bulk_set_t *set,
                    attnd_buf_t *skeleton) {
  const char *p = src, *end = src + n;
  const char *copied = src; /* src[copied..p) is still to be copied */
  size_t depth = 0;         /* containers open at p */
  scratch_t sc = {NULL, 0, 0};
  int oom = 0;
  while (p < end && !oom) {
    switch (*p) {
    case '"': { /* a string: skip to its closing quote */
      const char *open = p++;
      int escapes = 0;
      for (;;) { /* the next quote that no backslash escapes */
        const char *q = memchr(p, '"', (size_t)(end - p));
        const char *bs = memchr(p, '\\', (size_t)((q ? q : end) - p));
        if (bs == NULL) {
          p = q ? q + 1 : end;
          break;
        }
        escapes = 1;
        p = bs + 2 < end ? bs + 2 : end;
      }
      size_t len = (size_t)(p - open);
      if (!escapes && min_string && p[-1] == '"' && len >= min_string + 2 &&
          printable(open + 1, len - 2)) {
        attnd_bulk_t item = {.text = open + 1, .text_len = len - 2};
        attnd_buf_append(skeleton, copied, (size_t)(open - copied));
        oom = bulk_add(set, &item, skeleton) < 0;
        copied = p;
      }
      break;
    }
    case '[': {
      attnd_bulk_t item;
      const char *after = NULL;
      if (depth + 2 <= JSON_PARSER_MAX_DEPTH) {
        size_t room = JSON_PARSER_MAX_DEPTH - 1 - depth; /* ranks that fit */
        int max_rank =
            room < ATTND_BULK_MAX_RANK ? (int)room : ATTND_BULK_MAX_RANK;
        after = bulk_try(p, end, max_rank, min_elems, &sc, &item, &oom);
      }
      if (after) {
        attnd_buf_append(skeleton, copied, (size_t)(p - copied));
        oom = bulk_add(set, &item, skeleton) < 0;
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
      break;
    case ']':
    case '}':
      depth -= depth > 0;
      p++;
      break;
    default:
      p++;
    }
  }
  free(sc.x);
  if (!oom) {
    attnd_buf_append(skeleton, copied, (size_t)(p - copied));
    oom = skeleton->oom;
  }
  return oom ? -1 : 0;
}
