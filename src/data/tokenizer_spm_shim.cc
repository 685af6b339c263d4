// libsentencepiece behind extern "C" functions (tokenizer_spm_shim.h). No exception leaves this
// file: allocation failures and library errors become return codes with a message.
#include "data/tokenizer_spm_shim.h"

#include <sentencepiece_processor.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

struct mg_spm {
    sentencepiece::SentencePieceProcessor sp;
};

static int fail(const sentencepiece::util::Status &s, char *err, size_t cap) {
    std::snprintf(err, cap, "%s", s.ToString().c_str());
    for (char *c = err; *c; c++)
        if (*c == '\n') *c = ' ';
    return MG_SPM_ERROR;
}

extern "C" int mg_spm_load(const char *path, mg_spm **out, char *err, size_t err_cap) {
    *out = nullptr;
    try {
        mg_spm *p = new mg_spm;
        sentencepiece::util::Status s = p->sp.Load(path);
        if (!s.ok()) {
            delete p;
            return fail(s, err, err_cap);
        }
        *out = p;
        return MG_SPM_OK;
    } catch (const std::bad_alloc &) {
        return MG_SPM_NOMEM;
    } catch (...) {
        std::snprintf(err, err_cap, "libsentencepiece threw while loading");
        return MG_SPM_ERROR;
    }
}

extern "C" void mg_spm_free(mg_spm *p) {
    delete p;
}

extern "C" void mg_spm_ids(const mg_spm *p, int *pieces, int *bos, int *eos, int *pad, int *unk) {
    *pieces = p->sp.GetPieceSize();
    *bos = p->sp.bos_id();
    *eos = p->sp.eos_id();
    *pad = p->sp.pad_id();
    *unk = p->sp.unk_id();
}

extern "C" int mg_spm_encode(const mg_spm *p, const char *text, size_t len, int32_t **ids,
                             size_t *n, size_t *cap, char *err, size_t err_cap) {
    try {
        std::vector<int> out;
        sentencepiece::util::Status s = p->sp.Encode(std::string_view(text, len), &out);
        if (!s.ok()) return fail(s, err, err_cap);
        if (*n + out.size() > *cap) {
            size_t c = *cap < 1024 ? 1024 : *cap;
            while (c < *n + out.size()) c *= 2;
            void *q = std::realloc(*ids, c * sizeof(int32_t));
            if (!q) return MG_SPM_NOMEM;
            *ids = static_cast<int32_t *>(q);
            *cap = c;
        }
        for (size_t i = 0; i < out.size(); i++) (*ids)[*n + i] = out[i];
        *n += out.size();
        return MG_SPM_OK;
    } catch (const std::bad_alloc &) {
        return MG_SPM_NOMEM;
    } catch (...) {
        std::snprintf(err, err_cap, "libsentencepiece threw while encoding");
        return MG_SPM_ERROR;
    }
}

extern "C" int mg_spm_decode(const mg_spm *p, const int32_t *ids, size_t n, char **text,
                             size_t *len, char *err, size_t err_cap) {
    *text = nullptr;
    *len = 0;
    try {
        std::vector<int> in(ids, ids + n);
        std::string out;
        sentencepiece::util::Status s = p->sp.Decode(in, &out);
        if (!s.ok()) return fail(s, err, err_cap);
        char *c = static_cast<char *>(std::malloc(out.size() + 1));
        if (!c) return MG_SPM_NOMEM;
        std::memcpy(c, out.data(), out.size());
        c[out.size()] = '\0';
        *text = c;
        *len = out.size();
        return MG_SPM_OK;
    } catch (const std::bad_alloc &) {
        return MG_SPM_NOMEM;
    } catch (...) {
        std::snprintf(err, err_cap, "libsentencepiece threw while decoding");
        return MG_SPM_ERROR;
    }
}
