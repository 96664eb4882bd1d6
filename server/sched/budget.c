/* server/sched/budget.c: see budget.h. */
#include "sched/budget.h"

#include <stdatomic.h>

int attnd_budget_take(attnd_budget_t *b, int64_t bytes, int64_t *held) {
  int64_t used = atomic_load(&b->used);
  do {
    if (used + atomic_load(&b->scratch) + bytes > b->max)
      return -1;
  } while (!atomic_compare_exchange_weak(&b->used, &used, used + bytes));
  *held += bytes;
  return 0;
}

void attnd_budget_give(attnd_budget_t *b, int64_t *held) {
  atomic_fetch_sub(&b->used, *held);
  *held = 0;
}

void attnd_budget_scratch(attnd_budget_t *b, int64_t delta) {
  atomic_fetch_add(&b->scratch, delta);
}

int64_t attnd_budget_used(const attnd_budget_t *b) {
  return atomic_load(&b->used) + atomic_load(&b->scratch);
}
