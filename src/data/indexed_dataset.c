/* Megatron's indexed dataset: reader (validated, the .bin memory-mapped) and writer (as
 * IndexedDatasetBuilder + _IndexWriter). Layout in indexed_dataset.h.
 *
 * The .idx arrays start at byte 34, so they are not aligned for int32/int64 access; the reader
 * copies them into one aligned allocation (12 bytes per sequence + 8 per document) instead of
 * mapping the .idx, and validates the copy. The .bin is mapped: validated pointers are multiples of
 * the dtype size from a page-aligned base, so typed access is aligned. */
#include "data/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "indexed_dataset.c reads and writes little-endian files on a little-endian host only"
#endif

static const char k_magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
enum { HEADER_BYTES = 34 }; /* magic 9 + version 8 + dtype 1 + sequence count 8 + doc count 8 */

size_t mg_indexed_dtype_size(int code) {
    switch (code) {
    case MG_IDX_UINT8:
    case MG_IDX_INT8:
        return 1;
    case MG_IDX_INT16:
    case MG_IDX_UINT16:
        return 2;
    case MG_IDX_INT32:
    case MG_IDX_FLOAT32:
        return 4;
    case MG_IDX_INT64:
    case MG_IDX_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

int mg_indexed_optimal_dtype(int64_t vocab_size) {
    return vocab_size < 65500 ? MG_IDX_UINT16 : MG_IDX_INT32;
}

/* ---------------------------------------------------------------- reader */

/* Reads exactly n bytes at offset; the caller has checked the file is long enough. */
static mg_status pread_all(int fd, void *buf, size_t n, off_t off, const char *path,
                           const char *what) {
    char *p = buf;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return MG_FAIL(MG_ERR_IO, "%s: cannot read the %s: %s", path, what,
                           r < 0 ? strerror(errno) : "unexpected end of file");
        p += r, n -= (size_t)r, off += r;
    }
    return MG_OK;
}

static uint64_t le64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Checks the header, reads the three arrays into an aligned copy, checks them. */
static mg_status read_index(mg_indexed_dataset *d, int fd, const char *path, size_t size) {
    if (size == 0) return MG_FAIL(MG_ERR_FORMAT, "%s: empty file (expected an .idx header)", path);
    unsigned char h[HEADER_BYTES];
    if (size < HEADER_BYTES)
        return MG_FAIL(MG_ERR_FORMAT, "%s: truncated header: %zu bytes, the header needs %d", path,
                       size, HEADER_BYTES);
    MG_CHECK(pread_all(fd, h, HEADER_BYTES, 0, path, "header"));
    if (memcmp(h, k_magic, sizeof k_magic) != 0)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: bad magic: not a Megatron indexed dataset (expected MMIDIDX\\0\\0)",
                       path);
    uint64_t version = le64(h + 9);
    if (version != 1)
        return MG_FAIL(MG_ERR_FORMAT, "%s: version %llu, only version 1 is supported", path,
                       (unsigned long long)version);
    d->dtype_code = h[17];
    d->dtype_size = mg_indexed_dtype_size(d->dtype_code);
    if (d->dtype_size == 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: unknown dtype code %d (Megatron's DType codes are 1-8)",
                       path, d->dtype_code);
    uint64_t nseq = le64(h + 18), ndoc1 = le64(h + 26);
    /* Divide before multiplying: the counts are untrusted 64-bit values. */
    uint64_t body = size - HEADER_BYTES;
    if (nseq > body / 12 || ndoc1 > (body - nseq * 12) / 8)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: truncated: the header promises %llu sequences and %llu document "
                       "indices, which need more than the file's %zu bytes",
                       path, (unsigned long long)nseq, (unsigned long long)ndoc1, size);
    uint64_t need = HEADER_BYTES + nseq * 12 + ndoc1 * 8;
    if (need != size)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: %llu bytes after the document indices (multimodal sequence modes or "
                       "garbage; not supported)",
                       path, (unsigned long long)(size - need));
    if (ndoc1 == 0)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: document count 0: document_indices must hold at least "
                       "the leading 0",
                       path);
    d->num_sequences = (int64_t)nseq;
    d->num_documents = (int64_t)ndoc1 - 1;
    if (d->num_documents == 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: empty dataset: 0 documents", path);

    size_t bytes = (size_t)(nseq * 12 + ndoc1 * 8);
    char *buf = malloc(bytes ? bytes : 1);
    if (!buf)
        return MG_FAIL(MG_ERR_NOMEM, "%s: cannot allocate %zu bytes for the index", path, bytes);
    d->idx_map = buf;
    int64_t *ptrs = (int64_t *)buf, *docs = ptrs + nseq;
    int32_t *lens = (int32_t *)(docs + ndoc1);
    MG_CHECK(pread_all(fd, lens, nseq * 4, HEADER_BYTES, path, "sequence lengths"));
    MG_CHECK(pread_all(fd, ptrs, nseq * 8, HEADER_BYTES + nseq * 4, path, "sequence pointers"));
    MG_CHECK(pread_all(fd, docs, ndoc1 * 8, HEADER_BYTES + nseq * 12, path, "document indices"));
    d->sequence_lengths = lens, d->sequence_pointers = ptrs, d->document_indices = docs;

    /* Pointers must be exactly what _IndexWriter computes: a running sum of length × size. */
    int64_t expect = 0;
    for (int64_t i = 0; i < (int64_t)nseq; i++) {
        if (lens[i] < 0)
            return MG_FAIL(MG_ERR_FORMAT, "%s: sequence_lengths[%lld] = %d is negative", path,
                           (long long)i, lens[i]);
        if (ptrs[i] != expect)
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: sequence_pointers[%lld] = %lld, expected %lld (the sum of the "
                           "previous lengths × %zu bytes)",
                           path, (long long)i, (long long)ptrs[i], (long long)expect,
                           d->dtype_size);
        expect += (int64_t)lens[i] * (int64_t)d->dtype_size; /* < 2^31 * 8 * 2^60: no overflow */
        if (expect < 0 || (uint64_t)expect > (uint64_t)INT64_MAX / 2)
            return MG_FAIL(MG_ERR_FORMAT, "%s: sequence lengths add up to an impossible size",
                           path);
    }
    if (docs[0] != 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: document_indices[0] = %lld, must be 0", path,
                       (long long)docs[0]);
    for (uint64_t i = 1; i < ndoc1; i++)
        if (docs[i] < docs[i - 1])
            return MG_FAIL(MG_ERR_FORMAT,
                           "%s: document_indices not monotone: [%llu] = %lld < [%llu] = %lld", path,
                           (unsigned long long)i, (long long)docs[i], (unsigned long long)(i - 1),
                           (long long)docs[i - 1]);
    if (docs[ndoc1 - 1] != (int64_t)nseq)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: document_indices end at %lld, must end at the sequence count %llu",
                       path, (long long)docs[ndoc1 - 1], (unsigned long long)nseq);
    d->bin_size = (size_t)expect; /* checked against the .bin by the caller */
    return MG_OK;
}

static mg_status open_file(const char *path, int *fd, size_t *size) {
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) return MG_FAIL(MG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(*fd), *fd = -1;
        return MG_FAIL(MG_ERR_IO, "%s: not a regular file", path);
    }
    *size = (size_t)st.st_size;
    return MG_OK;
}

static mg_status open_impl(mg_indexed_dataset *d, const char *prefix, char *path, size_t cap) {
    int fd = -1;
    size_t size = 0;
    snprintf(path, cap, "%s.idx", prefix);
    MG_CHECK(open_file(path, &fd, &size));
    d->idx_size = size;
    mg_status st = read_index(d, fd, path, size);
    close(fd);
    if (st != MG_OK) return st;

    size_t expect = d->bin_size;
    d->bin_size = 0;
    snprintf(path, cap, "%s.bin", prefix);
    MG_CHECK(open_file(path, &fd, &size));
    if (size != expect) {
        close(fd);
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: %s%zu bytes, but %s.idx describes %zu (sum of sequence lengths × %zu)",
                       path, size < expect ? "truncated: " : "", size, prefix, expect,
                       d->dtype_size);
    }
    if (size > 0) {
        void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return MG_FAIL(MG_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
        }
        d->bin_map = m, d->bin_size = size;
    }
    close(fd);
    return MG_OK;
}

mg_status mg_indexed_dataset_open(mg_indexed_dataset *d, const char *prefix) {
    memset(d, 0, sizeof *d);
    if (strlen(prefix) + 5 > sizeof d->prefix)
        return MG_FAIL(MG_ERR_USAGE, "dataset prefix too long (%zu bytes, at most %zu): %.64s...",
                       strlen(prefix), sizeof d->prefix - 5, prefix);
    snprintf(d->prefix, sizeof d->prefix, "%s", prefix);
    char path[sizeof d->prefix + 8];
    mg_status st = open_impl(d, prefix, path, sizeof path);
    if (st != MG_OK) mg_indexed_dataset_close(d);
    return st;
}

void mg_indexed_dataset_close(mg_indexed_dataset *d) {
    free(d->idx_map);
    if (d->bin_map) munmap(d->bin_map, d->bin_size);
    memset(d, 0, sizeof *d);
}

mg_status mg_indexed_dataset_read(const mg_indexed_dataset *d, int64_t seq, int64_t offset,
                                  int64_t length, int32_t *out) {
    if (seq < 0 || seq >= d->num_sequences)
        return MG_FAIL(MG_ERR_USAGE, "%s: sequence %lld out of range [0, %lld)", d->prefix,
                       (long long)seq, (long long)d->num_sequences);
    int64_t n = d->sequence_lengths[seq];
    if (offset < 0 || length < 0 || offset > n || length > n - offset)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s: tokens [%lld, +%lld) outside sequence %lld of %lld tokens", d->prefix,
                       (long long)offset, (long long)length, (long long)seq, (long long)n);
    if (length == 0) return MG_OK; /* an empty dataset maps no .bin: no base pointer to offset */
    const char *base = (const char *)d->bin_map + d->sequence_pointers[seq];
    switch (d->dtype_code) {
    case MG_IDX_UINT8:
        for (int64_t i = 0; i < length; i++) out[i] = ((const uint8_t *)base)[offset + i];
        return MG_OK;
    case MG_IDX_INT8:
        for (int64_t i = 0; i < length; i++) out[i] = ((const int8_t *)base)[offset + i];
        return MG_OK;
    case MG_IDX_INT16:
        for (int64_t i = 0; i < length; i++) out[i] = ((const int16_t *)base)[offset + i];
        return MG_OK;
    case MG_IDX_UINT16:
        for (int64_t i = 0; i < length; i++) out[i] = ((const uint16_t *)base)[offset + i];
        return MG_OK;
    case MG_IDX_INT32:
        if (length > 0) memcpy(out, (const int32_t *)base + offset, (size_t)length * 4);
        return MG_OK;
    case MG_IDX_INT64:
        for (int64_t i = 0; i < length; i++) {
            int64_t v = ((const int64_t *)base)[offset + i];
            if (v < INT32_MIN || v > INT32_MAX)
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s.bin: token %lld of sequence %lld does not fit "
                               "int32",
                               d->prefix, (long long)(offset + i), (long long)seq);
            out[i] = (int32_t)v;
        }
        return MG_OK;
    default:
        return MG_FAIL(MG_ERR_UNSUPPORTED, "%s.idx: dtype code %d holds floats, not token ids",
                       d->prefix, d->dtype_code);
    }
}

/* ---------------------------------------------------------------- writer */

struct mg_indexed_writer {
    char bin_path[1040], idx_path[1040], bin_tmp[1072], idx_tmp[1072];
    int dtype_code;
    size_t dtype_size;
    FILE *bin;
    int32_t *lens; /* (nseq) */
    int64_t nseq, lens_cap;
    int64_t *docs; /* (ndocs + 1) */
    int64_t ndoc1, docs_cap;
    void *scratch; /* converted tokens of one document */
    size_t scratch_cap;
    int finished;
};

mg_status mg_indexed_writer_open(mg_indexed_writer **out, const char *prefix, int dtype_code) {
    *out = NULL;
    size_t dsize = mg_indexed_dtype_size(dtype_code);
    if (dsize == 0 || dtype_code == MG_IDX_FLOAT32 || dtype_code == MG_IDX_FLOAT64)
        return MG_FAIL(MG_ERR_USAGE, "indexed writer: dtype code %d is not an integer dtype",
                       dtype_code);
    if (strlen(prefix) + 5 > 1024)
        return MG_FAIL(MG_ERR_USAGE, "output prefix too long (%zu bytes): %.64s...", strlen(prefix),
                       prefix);
    mg_indexed_writer *w = calloc(1, sizeof *w);
    if (!w) return MG_FAIL(MG_ERR_NOMEM, "indexed writer: out of memory");
    w->dtype_code = dtype_code, w->dtype_size = dsize;
    snprintf(w->bin_path, sizeof w->bin_path, "%s.bin", prefix);
    snprintf(w->idx_path, sizeof w->idx_path, "%s.idx", prefix);
    snprintf(w->bin_tmp, sizeof w->bin_tmp, "%s.bin.tmp%ld", prefix, (long)getpid());
    snprintf(w->idx_tmp, sizeof w->idx_tmp, "%s.idx.tmp%ld", prefix, (long)getpid());
    w->docs_cap = 1024;
    w->docs = malloc(sizeof *w->docs * (size_t)w->docs_cap);
    if (!w->docs) {
        free(w);
        return MG_FAIL(MG_ERR_NOMEM, "indexed writer: out of memory");
    }
    w->docs[0] = 0, w->ndoc1 = 1;
    w->bin = fopen(w->bin_tmp, "wb");
    if (!w->bin) {
        mg_status st = MG_FAIL(MG_ERR_IO, "%s: cannot create: %s", w->bin_tmp, strerror(errno));
        free(w->docs), free(w);
        return st;
    }
    setvbuf(w->bin, NULL, _IOFBF, 1 << 20);
    *out = w;
    return MG_OK;
}

static mg_status grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return MG_OK;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return MG_FAIL(MG_ERR_NOMEM, "indexed writer: out of memory (%lld entries)", (long long)c);
    *p = q, *cap = c;
    return MG_OK;
}

/* Token range of each dtype; Megatron's numpy cast would wrap silently, we refuse. */
static int fits(int code, int32_t v) {
    switch (code) {
    case MG_IDX_UINT8:
        return v >= 0 && v <= 255;
    case MG_IDX_INT8:
        return v >= -128 && v <= 127;
    case MG_IDX_INT16:
        return v >= -32768 && v <= 32767;
    case MG_IDX_UINT16:
        return v >= 0 && v <= 65535;
    default:
        return 1;
    }
}

mg_status mg_indexed_writer_add_document(mg_indexed_writer *w, const int32_t *tokens,
                                         const int32_t *sequence_lengths, int64_t num_sequences) {
    if (w->finished || !w->bin)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: add_document after finish", w->bin_path);
    if (num_sequences < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: negative sequence count", w->bin_path);
    int64_t ntok = 0;
    for (int64_t i = 0; i < num_sequences; i++) {
        if (sequence_lengths[i] < 0)
            return MG_FAIL(MG_ERR_INTERNAL, "%s: negative sequence length", w->bin_path);
        ntok += sequence_lengths[i];
    }
    size_t bytes = (size_t)ntok * w->dtype_size;
    if (bytes > w->scratch_cap) {
        void *s = realloc(w->scratch, bytes);
        if (!s) return MG_FAIL(MG_ERR_NOMEM, "%s: out of memory (%zu bytes)", w->bin_path, bytes);
        w->scratch = s, w->scratch_cap = bytes;
    }
    /* Range check in one pass (a min/max reduction), then a plain narrowing loop per size. */
    int32_t lo = 0, hi = 0;
    if (ntok > 0) lo = hi = tokens[0];
    for (int64_t i = 1; i < ntok; i++) {
        lo = tokens[i] < lo ? tokens[i] : lo;
        hi = tokens[i] > hi ? tokens[i] : hi;
    }
    if (ntok > 0 && (!fits(w->dtype_code, lo) || !fits(w->dtype_code, hi)))
        return MG_FAIL(MG_ERR_USAGE, "%s: token id %d does not fit dtype code %d", w->bin_path,
                       fits(w->dtype_code, lo) ? hi : lo, w->dtype_code);
    void *o = w->scratch;
    switch (w->dtype_size) {
    case 1:
        for (int64_t i = 0; i < ntok; i++) ((uint8_t *)o)[i] = (uint8_t)tokens[i];
        break;
    case 2:
        for (int64_t i = 0; i < ntok; i++) ((uint16_t *)o)[i] = (uint16_t)tokens[i];
        break;
    case 4:
        if (ntok > 0) memcpy(o, tokens, (size_t)ntok * 4);
        break;
    default:
        for (int64_t i = 0; i < ntok; i++) ((int64_t *)o)[i] = tokens[i];
        break;
    }
    if (bytes && fwrite(w->scratch, 1, bytes, w->bin) != bytes)
        return MG_FAIL(MG_ERR_IO, "%s: write failed: %s", w->bin_tmp, strerror(errno));
    MG_CHECK(grow((void **)&w->lens, &w->lens_cap, w->nseq + num_sequences, sizeof *w->lens));
    MG_CHECK(grow((void **)&w->docs, &w->docs_cap, w->ndoc1 + 1, sizeof *w->docs));
    if (num_sequences) memcpy(w->lens + w->nseq, sequence_lengths, (size_t)num_sequences * 4);
    w->nseq += num_sequences;
    w->docs[w->ndoc1++] = w->nseq;
    return MG_OK;
}

static mg_status write_index(mg_indexed_writer *w, FILE *f) {
    unsigned char h[HEADER_BYTES];
    uint64_t version = 1, nseq = (uint64_t)w->nseq, ndoc1 = (uint64_t)w->ndoc1;
    memcpy(h, k_magic, 9);
    memcpy(h + 9, &version, 8);
    h[17] = (unsigned char)w->dtype_code;
    memcpy(h + 18, &nseq, 8);
    memcpy(h + 26, &ndoc1, 8);
    int ok = fwrite(h, 1, sizeof h, f) == sizeof h;
    ok = ok && fwrite(w->lens, 4, (size_t)w->nseq, f) == (size_t)w->nseq;
    int64_t ptr = 0;
    for (int64_t i = 0; ok && i < w->nseq; i++) {
        ok = fwrite(&ptr, 8, 1, f) == 1;
        ptr += (int64_t)w->lens[i] * (int64_t)w->dtype_size;
    }
    ok = ok && fwrite(w->docs, 8, (size_t)w->ndoc1, f) == (size_t)w->ndoc1;
    if (!ok) return MG_FAIL(MG_ERR_IO, "%s: write failed: %s", w->idx_tmp, strerror(errno));
    return MG_OK;
}

mg_status mg_indexed_writer_finish(mg_indexed_writer *w) {
    if (w->finished || !w->bin)
        return MG_FAIL(MG_ERR_INTERNAL, "%s: finish called twice", w->bin_path);
    /* Flushed to disk before the renames, so a crash never leaves a renamed but partial file. */
    int bad = fflush(w->bin) != 0 || ferror(w->bin) || fsync(fileno(w->bin)) != 0;
    bad |= fclose(w->bin) != 0;
    w->bin = NULL;
    if (bad) return MG_FAIL(MG_ERR_IO, "%s: write failed: %s", w->bin_tmp, strerror(errno));
    FILE *f = fopen(w->idx_tmp, "wb");
    if (!f) return MG_FAIL(MG_ERR_IO, "%s: cannot create: %s", w->idx_tmp, strerror(errno));
    mg_status st = write_index(w, f);
    if (st == MG_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        st = MG_FAIL(MG_ERR_IO, "%s: write failed: %s", w->idx_tmp, strerror(errno));
    if (fclose(f) != 0 && st == MG_OK)
        st = MG_FAIL(MG_ERR_IO, "%s: write failed: %s", w->idx_tmp, strerror(errno));
    if (st != MG_OK) return st;
    /* .bin first: whoever sees the new .idx finds the matching .bin. */
    if (rename(w->bin_tmp, w->bin_path) != 0)
        return MG_FAIL(MG_ERR_IO, "%s: cannot rename to %s: %s", w->bin_tmp, w->bin_path,
                       strerror(errno));
    if (rename(w->idx_tmp, w->idx_path) != 0)
        return MG_FAIL(MG_ERR_IO, "%s: cannot rename to %s: %s", w->idx_tmp, w->idx_path,
                       strerror(errno));
    w->finished = 1;
    return MG_OK;
}

void mg_indexed_writer_free(mg_indexed_writer *w) {
    if (!w) return;
    if (w->bin) fclose(w->bin);
    if (!w->finished) unlink(w->bin_tmp), unlink(w->idx_tmp);
    free(w->lens), free(w->docs), free(w->scratch), free(w);
}
