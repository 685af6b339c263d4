/* Fuzz harness bodies; see fuzz_harness.h. */
#include "fuzz_harness.h"

#include "core/status.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

/* The .bin size the .idx asks for, read leniently (capped), so that many fuzz inputs get past
 * the size check and reach the reads. */
static size_t lenient_bin_size(const uint8_t *idx, size_t n) {
    if (n < 34) return 0;
    size_t ds = mg_indexed_dtype_size(idx[17]);
    uint64_t nseq;
    memcpy(&nseq, idx + 18, 8);
    if (ds == 0 || nseq > (n - 34) / 4) return 0;
    uint64_t total = 0;
    for (uint64_t i = 0; i < nseq && total < (1u << 20); i++) {
        int32_t l;
        memcpy(&l, idx + 34 + 4 * i, 4);
        if (l > 0) total += (uint64_t)l * ds;
    }
    return total < (1u << 20) ? (size_t)total : (1u << 20);
}

static int one_line(const char *msg) {
    return msg[0] && !strchr(msg, '\n');
}

int mg_fuzz_indexed_one(const uint8_t *data, size_t size, const char *dir) {
    if (size < 1) return 0;
    uint8_t mode = data[0];
    const uint8_t *idx = data + 1;
    size_t n = size - 1, bin_n = (mode & 1) ? lenient_bin_size(idx, n) : (size_t)(mode >> 1) * 3;
    if ((mode & 3) == 3 && bin_n > 0) bin_n -= 1 + (mode >> 2) % bin_n; /* near misses */
    uint8_t *bin = malloc(bin_n ? bin_n : 1);
    if (!bin) return 0;
    for (size_t i = 0; i < bin_n; i++) bin[i] = (uint8_t)(i * 31u + mode);
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz.idx", dir);
    write_file(path, idx, n);
    snprintf(path, sizeof path, "%s/fuzz.bin", dir);
    write_file(path, bin, bin_n);
    char prefix[512];
    snprintf(prefix, sizeof prefix, "%s/fuzz", dir);
    mg_indexed_dataset d;
    mg_error_clear();
    mg_status st = mg_indexed_dataset_open(&d, prefix);
    int result = 0;
    if (st != MG_OK) {
        result = one_line(mg_error_message()) && !d.idx_map && !d.bin_map ? 0 : -1;
        free(bin);
        return result;
    }
    result = 1;
    /* The invariants open promises, checked independently. */
    if (d.num_documents < 1 || d.document_indices[0] != 0 ||
        d.document_indices[d.num_documents] != d.num_sequences)
        result = -1;
    int32_t *out = malloc(sizeof *out * 4096);
    int64_t picks[4] = {0, d.num_sequences - 1, d.num_sequences / 2, (int64_t)(mode % 7)};
    for (int p = 0; out && result == 1 && p < 4; p++) {
        int64_t s = picks[p];
        if (s < 0 || s >= d.num_sequences) continue;
        int64_t len = d.sequence_lengths[s], take = len < 4096 ? len : 4096;
        if ((size_t)d.sequence_pointers[s] + (size_t)len * d.dtype_size > d.bin_size) result = -1;
        mg_status r = mg_indexed_dataset_read(&d, s, 0, take, out);
        if (r == MG_OK && d.dtype_code == MG_IDX_UINT16) {
            for (int64_t i = 0; i < take; i++) {
                uint16_t v;
                memcpy(&v, bin + d.sequence_pointers[s] + 2 * i, 2);
                if (out[i] != v) result = -1;
            }
        } else if (r != MG_OK && !one_line(mg_error_message())) {
            result = -1;
        }
        if (mg_indexed_dataset_read(&d, s, len, 1, out) == MG_OK) result = -1; /* past the end */
    }
    free(out);
    mg_indexed_dataset_close(&d);
    free(bin);
    return result;
}

/* Decoded text must be valid UTF-8 (raw bytes are validated, escapes encoded). */
static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

int mg_fuzz_jsonl_one(const uint8_t *data, size_t size) {
    static const char *const one[] = {"text"}, *const three[] = {"text", "title", "a"};
    mg_jsonl_doc doc;
    memset(&doc, 0, sizeof doc);
    size_t pos = 0, len;
    int good = 0;
    const char *buf = (const char *)data;
    for (const char *l; (l = mg_jsonl_next_line(buf, size, &pos, &len));) {
        if (l < buf || l + len > buf + size || pos > size || (size_t)(l - buf) >= pos) {
            good = -1;
            break;
        }
        for (int pass = 0; pass < 2; pass++) {
            int nk = pass ? 3 : 1;
            mg_jsonl_error e = mg_jsonl_extract(&doc, l, len, pass ? three : one, nk);
            if (e == MG_JSONL_OK) {
                for (int k = 0; k < nk; k++)
                    for (size_t s = doc.key_first[k]; s < doc.key_first[k] + doc.key_count[k]; s++)
                        if (s >= doc.nstrs || doc.str_off[s] + doc.str_len[s] > doc.text_len)
                            good = -1;
                if (!valid_utf8((const unsigned char *)doc.text, doc.text_len)) good = -1;
                if (good >= 0 && pass == 0) good++;
            } else if (e > MG_JSONL_NOMEM || doc.err_col > len) {
                good = -1;
            }
        }
        if (good < 0) break;
    }
    mg_jsonl_doc_free(&doc);
    return good;
}
