/* The golden-vector reader, and consistency checks of the committed golden files themselves:
 * shapes, the loss recomputed from the logits, the grad norm recomputed from the gradients, the LR
 * schedule, and that the weight file, the grad.* and the final.* records name the same tensors. */
#include "test.h"

#include "core/safetensors.h"
#include "core/status.h"
#include "golden_io.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { B = 4, S = 16, V = 128 };

static const mg_golden_record *expect_record(mg_test_ctx *t, const mg_golden *g, const char *name,
                                             int dtype, int ndim, const int64_t *shape) {
    const mg_golden_record *r = mg_golden_find(g, name);
    MG_EXPECT(r != NULL, "record '%s' missing", name);
    if (!r) return NULL;
    int ok = r->dtype == dtype && r->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = r->shape[i] == shape[i];
    MG_EXPECT(ok, "record '%s': dtype %d ndim %d, not as expected", name, r->dtype, r->ndim);
    return ok ? r : NULL;
}

static int all_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Checks <model>.golden against <model>.safetensors; n_params is the expected tensor count. */
static void check_model(mg_test_ctx *t, const char *model, int n_params) {
    char path[256];
    mg_golden g;
    snprintf(path, sizeof path, "%s/%s.golden", MG_GOLDEN_DIR, model);
    mg_status s = mg_golden_load(&g, path);
    MG_EXPECT(s == MG_OK, "load: %s", mg_error_message());
    if (s != MG_OK) return;
    mg_safetensors st;
    snprintf(path, sizeof path, "%s/%s.safetensors", MG_GOLDEN_DIR, model);
    s = mg_safetensors_open(&st, path);
    MG_EXPECT(s == MG_OK, "open: %s", mg_error_message());
    if (s != MG_OK) {
        mg_golden_free(&g);
        return;
    }

    const int64_t bs[2] = {B, S}, bsv[3] = {B, S, V}, one[1] = {1}, three[1] = {3};
    const mg_golden_record *tok = expect_record(t, &g, "tokens", MG_GOLDEN_I32, 2, bs);
    const mg_golden_record *tgt = expect_record(t, &g, "targets", MG_GOLDEN_I32, 2, bs);
    const mg_golden_record *lg = expect_record(t, &g, "logits", MG_GOLDEN_F32, 3, bsv);
    const mg_golden_record *ls = expect_record(t, &g, "loss", MG_GOLDEN_F32, 1, one);
    const mg_golden_record *sl = expect_record(t, &g, "step_loss", MG_GOLDEN_F32, 1, three);
    const mg_golden_record *sn = expect_record(t, &g, "step_grad_norm", MG_GOLDEN_F32, 1, three);
    const mg_golden_record *sr = expect_record(t, &g, "step_lr", MG_GOLDEN_F32, 1, three);
    MG_EXPECT(g.n == 7 + 2 * n_params, "%d records, want %d", g.n, 7 + 2 * n_params);
    MG_EXPECT(st.n == n_params, "%d tensors in the weight file, want %d", st.n, n_params);
    if (!tok || !tgt || !lg || !ls || !sl || !sn || !sr) goto done;

    const int32_t *tk = tok->data, *tg = tgt->data;
    for (int i = 0; i < B * S; i++)
        MG_EXPECT(tk[i] >= 0 && tk[i] < V && tg[i] >= 0 && tg[i] < V, "token %d out of range", i);
    const float *logits = lg->data;
    MG_EXPECT(all_finite(logits, lg->numel), "logits not finite");

    /* The loss, recomputed in double from the logits: mean cross-entropy over all B*S tokens. */
    double ce = 0;
    for (int i = 0; i < B * S; i++) {
        const float *row = logits + (size_t)i * V;
        double mx = row[0], sum = 0;
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
        ce += log(sum) + mx - row[tg[i]];
    }
    ce /= B * S;
    float loss = ((const float *)ls->data)[0];
    MG_EXPECT(isfinite(loss) && fabs(loss - log((double)V)) < 0.1, "loss %g not near ln %d", loss,
              V);
    MG_EXPECT(fabs(ce - loss) < 1e-5 * fabs(ce), "loss %.7g, recomputed %.7g", loss, ce);

    const float *step_loss = sl->data, *norm = sn->data, *lr = sr->data;
    MG_EXPECT(step_loss[0] == loss, "step_loss[0] %g != loss %g", step_loss[0], loss);
    /* Megatron's schedule: warmup 1 -> lr(0) = 0, lr(1) = max; cosine to min at iteration 3. */
    const float want_lr[3] = {0.0f, 1e-2f, (float)(1e-3 + 0.5 * (1 + cos(M_PI * 0.5)) * 9e-3)};
    for (int k = 0; k < 3; k++) {
        MG_EXPECT(fabsf(lr[k] - want_lr[k]) <= 1e-7f, "step_lr[%d] %g, want %g", k, lr[k],
                  want_lr[k]);
        MG_EXPECT(norm[k] > 0.05f && isfinite(norm[k]), "step_grad_norm[%d] %g: clip 0.05 idle", k,
                  norm[k]);
        MG_EXPECT(isfinite(step_loss[k]), "step_loss[%d] not finite", k);
    }
    /* lr 0 at step 0 leaves the weights alone, so step 1 sees the same loss; then it falls. */
    MG_EXPECT(step_loss[1] == step_loss[0], "step_loss[1] %g != step_loss[0] %g", step_loss[1],
              step_loss[0]);
    MG_EXPECT(step_loss[2] < step_loss[1], "loss did not fall: %g -> %g", step_loss[1],
              step_loss[2]);

    /* Every weight has a gradient and a final value of its shape; together the gradients give
     * the step-0 grad norm, so none is missing or extra. */
    double sq = 0;
    int changed = 0;
    for (int i = 0; i < st.n; i++) {
        const mg_st_entry *e = &st.entries[i];
        char name[200];
        MG_EXPECT(e->dtype == MG_F32, "%s: dtype %s", e->name, mg_dtype_name(e->dtype));
        snprintf(name, sizeof name, "grad.%s", e->name);
        const mg_golden_record *gr = expect_record(t, &g, name, MG_GOLDEN_F32, e->ndim, e->shape);
        snprintf(name, sizeof name, "final.%s", e->name);
        const mg_golden_record *fr = expect_record(t, &g, name, MG_GOLDEN_F32, e->ndim, e->shape);
        if (!gr || !fr || (size_t)gr->numel * 4 != e->nbytes) continue;
        const float *gd = gr->data, *fd = fr->data;
        MG_EXPECT(all_finite(gd, gr->numel) && all_finite(fd, fr->numel), "%s not finite", e->name);
        int nonzero = 0;
        for (int64_t k = 0; k < gr->numel; k++) {
            sq += (double)gd[k] * gd[k];
            nonzero |= gd[k] != 0;
        }
        MG_EXPECT(nonzero, "grad.%s is all zero", e->name);
        changed += memcmp(fd, e->data, e->nbytes) != 0;
    }
    MG_EXPECT(fabs(sqrt(sq) - norm[0]) < 1e-5 * norm[0],
              "grad norm %.7g from the grads, %.7g "
              "recorded",
              sqrt(sq), norm[0]);
    MG_EXPECT(changed == st.n, "only %d of %d parameters changed in training", changed, st.n);
done:
    mg_safetensors_close(&st);
    mg_golden_free(&g);
}

MG_TEST(golden_io_gpt2_records) {
    check_model(t, "gpt2", 28);
}
MG_TEST(golden_io_llama_records) {
    check_model(t, "llama", 21);
}

/* The .json files hold {"args": [strings]} with the training flags the C side will parse. */
MG_TEST(golden_io_args_files_are_flag_lists) {
    const char *models[2] = {"gpt2", "llama"};
    for (int m = 0; m < 2; m++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s.json", MG_GOLDEN_DIR, models[m]);
        FILE *f = fopen(path, "rb");
        MG_EXPECT(f != NULL, "cannot open %s", path);
        if (!f) continue;
        char buf[8192];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = '\0';
        cJSON *j = cJSON_Parse(buf);
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "args");
        MG_EXPECT(cJSON_IsArray(args) && cJSON_GetArraySize(args) > 20, "%s: no args list", path);
        int strings = 1, has_clip = 0, has_layers = 0;
        for (const cJSON *a = args ? args->child : NULL; a; a = a->next) {
            strings &= cJSON_IsString(a);
            if (cJSON_IsString(a) && !strcmp(a->valuestring, "--clip-grad")) has_clip = 1;
            if (cJSON_IsString(a) && !strcmp(a->valuestring, "--num-layers")) has_layers = 1;
        }
        MG_EXPECT(strings && has_clip && has_layers, "%s: args not a flag list", path);
        cJSON_Delete(j);
    }
}

/* Writes bytes to a fresh temporary file; path receives its name. */
static int write_tmp(char *path, size_t cap, const void *p, size_t n) {
    snprintf(path, cap, "/tmp/mg_golden_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    int ok = write(fd, p, n) == (ssize_t)n;
    close(fd);
    return ok;
}

static void expect_load_fails(mg_test_ctx *t, const char *what, const void *p, size_t n,
                              mg_status code, const char *want) {
    char path[64];
    if (!write_tmp(path, sizeof path, p, n)) {
        MG_EXPECT(0, "%s: cannot write a temporary file", what);
        return;
    }
    mg_golden g;
    mg_error_clear();
    mg_status s = mg_golden_load(&g, path);
    MG_EXPECT(s == code, "%s: status %s, want %s (%s)", what, mg_status_name(s),
              mg_status_name(code), mg_error_message());
    MG_EXPECT(strstr(mg_error_message(), want), "%s: message '%s' lacks '%s'", what,
              mg_error_message(), want);
    MG_EXPECT(g.n == 0 && g.records == NULL, "%s: not left empty", what);
    if (s == MG_OK) mg_golden_free(&g);
    unlink(path);
}

MG_TEST(golden_io_rejects_bad_files) {
    /* A valid two-record file built by hand: "x" f32 (2,) and "i" i32 (). */
    unsigned char good[] = {
        'M',       'G', 'G', 'O', 'L', 'D', 'E',  'N',  1, 0, 0, 0,    2, 0, 0, 0,
        /* x */ 1, 0,   0,   0,   'x', 0,   0,    0,    0, 1, 0, 0,    0, 2, 0, 0, 0,
        0,         0,   0,   0,   0,   0,   0x80, 0x3f, 0, 0, 0, 0xc0,
        /* i */ 1, 0,   0,   0,   'i', 1,   0,    0,    0, 0, 0, 0,    0, 7, 0, 0, 0};
    char path[64];
    mg_golden g;
    if (write_tmp(path, sizeof path, good, sizeof good)) {
        MG_EXPECT_OK(mg_golden_load(&g, path));
        const mg_golden_record *x = mg_golden_find(&g, "x"), *i = mg_golden_find(&g, "i");
        MG_EXPECT(g.n == 2 && x && i && x->numel == 2 && i->ndim == 0 && i->numel == 1,
                  "hand-made file: wrong records");
        if (x && i && x->numel == 2 && i->numel == 1)
            MG_EXPECT(((float *)x->data)[0] == 1.0f && ((float *)x->data)[1] == -2.0f &&
                          ((int32_t *)i->data)[0] == 7,
                      "hand-made file: wrong values");
        MG_EXPECT(mg_golden_find(&g, "absent") == NULL, "find of an absent name");
        mg_golden_free(&g);
        unlink(path);
    }

    unsigned char bad[sizeof good + 4];
    memcpy(bad, good, sizeof good);
    bad[0] = 'X';
    expect_load_fails(t, "wrong magic", bad, sizeof good, MG_ERR_FORMAT, "magic");
    expect_load_fails(t, "empty file", bad, 0, MG_ERR_FORMAT, "magic");
    memcpy(bad, good, sizeof good);
    bad[8] = 2;
    expect_load_fails(t, "wrong version", bad, sizeof good, MG_ERR_FORMAT, "version 2");
    expect_load_fails(t, "truncated data", good, sizeof good - 3, MG_ERR_FORMAT, "truncated");
    expect_load_fails(t, "truncated mid-record", good, 30, MG_ERR_FORMAT, "truncated");
    expect_load_fails(t, "truncated header", good, 12, MG_ERR_FORMAT, "truncated");
    memcpy(bad, good, sizeof good);
    memset(bad + sizeof good, 0, 4);
    expect_load_fails(t, "trailing bytes", bad, sizeof good + 4, MG_ERR_FORMAT, "after the last");
    memcpy(bad, good, sizeof good);
    bad[12] = 0xff;
    bad[13] = 0xff; /* 65535 records */
    expect_load_fails(t, "huge count", bad, sizeof good, MG_ERR_FORMAT, "cannot fit");
    memcpy(bad, good, sizeof good);
    bad[21] = 5; /* dtype of "x" */
    expect_load_fails(t, "unknown dtype", bad, sizeof good, MG_ERR_FORMAT, "unknown dtype 5");
    memcpy(bad, good, sizeof good);
    bad[25] = 9; /* ndim of "x" */
    expect_load_fails(t, "too many dims", bad, sizeof good, MG_ERR_FORMAT, "9 dims");
    memcpy(bad, good, sizeof good);
    bad[36] = 0x80; /* top byte of x's dimension: negative */
    expect_load_fails(t, "negative dim", bad, sizeof good, MG_ERR_FORMAT, "bad dimension");
    memcpy(bad, good, sizeof good);
    bad[49] = 'x'; /* the second record's name */
    expect_load_fails(t, "duplicate name", bad, sizeof good, MG_ERR_FORMAT, "appears twice");

    mg_error_clear();
    mg_status s = mg_golden_load(&g, "/nonexistent/mg.golden");
    MG_EXPECT(s == MG_ERR_IO && strstr(mg_error_message(), "cannot open"), "missing file: %s",
              mg_error_message());
}
