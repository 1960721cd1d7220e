/*
 * A plain open-addressing flow table in C, the baseline of `flowshift bench`:
 * what one flow lookup costs on this machine with nothing around it. Keys are
 * 16 bytes (an IPv4 5-tuple, packed), entries 32 bytes, linear probing from a
 * multiplicative hash of the packet's RSS hash, at most half full; lookups one
 * at a time, or in bursts of 32 with every burst's home slot prefetched first.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

struct fs_entry {
    uint64_t k0, k1;
    uint32_t hash;
    uint32_t used;
    uint64_t value;
};

struct fs_table {
    struct fs_entry *e;
    uint64_t mask;
    unsigned shift;
};

static inline uint64_t home(const struct fs_table *t, uint32_t hash) {
    return (uint64_t)(((uint64_t)hash * 0x9e3779b97f4a7c15ull) >> t->shift) & t->mask;
}

/* A table holding keys[2i], keys[2i+1] with hash hashes[i] for i < n (value i). */
struct fs_table *fs_table_new(const uint64_t *keys, const uint32_t *hashes, size_t n) {
    size_t cap = 64;
    unsigned bits = 6;
    while (cap < 2 * n) {
        cap <<= 1;
        bits++;
    }
    struct fs_table *t = malloc(sizeof *t);
    if (!t)
        return NULL;
    t->e = calloc(cap, sizeof *t->e);
    if (!t->e) {
        free(t);
        return NULL;
    }
    t->mask = cap - 1;
    t->shift = 64 - bits;
    for (size_t i = 0; i < n; i++) {
        uint64_t j = home(t, hashes[i]);
        while (t->e[j].used && !(t->e[j].k0 == keys[2 * i] && t->e[j].k1 == keys[2 * i + 1]))
            j = (j + 1) & t->mask;
        t->e[j] = (struct fs_entry){keys[2 * i], keys[2 * i + 1], hashes[i], 1, i};
    }
    return t;
}

static inline int64_t probe(const struct fs_table *t, uint64_t j, uint64_t k0, uint64_t k1,
                            uint32_t hash) {
    for (;;) {
        const struct fs_entry *e = &t->e[j];
        if (!e->used)
            return -1;
        if (e->hash == hash && e->k0 == k0 && e->k1 == k1)
            return (int64_t)e->value;
        j = (j + 1) & t->mask;
    }
}

/* Looks up n keys in order; returns how many were found. */
size_t fs_table_lookup(const struct fs_table *t, const uint64_t *keys, const uint32_t *hashes,
                       size_t n, int burst) {
    size_t found = 0;
    if (!burst) {
        for (size_t i = 0; i < n; i++)
            found += probe(t, home(t, hashes[i]), keys[2 * i], keys[2 * i + 1], hashes[i]) >= 0;
        return found;
    }
    uint64_t h[32];
    for (size_t b = 0; b < n; b += 32) {
        size_t m = n - b < 32 ? n - b : 32;
        for (size_t i = 0; i < m; i++) {
            h[i] = home(t, hashes[b + i]);
            __builtin_prefetch(&t->e[h[i]]);
        }
        for (size_t i = 0; i < m; i++)
            found += probe(t, h[i], keys[2 * (b + i)], keys[2 * (b + i) + 1], hashes[b + i]) >= 0;
    }
    return found;
}

void fs_table_free(struct fs_table *t) {
    if (t) {
        free(t->e);
        free(t);
    }
}
