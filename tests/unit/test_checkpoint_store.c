/* The tensor store under checkpoints (train/checkpoint_store.c): tensors written as the pieces of
 * one tensor-parallel layout (whole local tensors, or distributed-optimizer runs of them) read
 * back under any other, each element landing where mg_param_global_index (model/params.c, an
 * independent mapping) says; and every damaged store is one line naming the file and the tensor.
 * Also mg_params_relayout's refusals. */
#include "test.h"

#include "core/file.h"
#include "config/flags.h"
#include "model/gpt.h"
#include "train/checkpoint_store.h"

#include <cjson/cJSON.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A Llama-shaped model (GQA, SwiGLU's stacked chunks, untied output) split over tp ranks. */
static mg_status tiny_model(mg_gpt *g, int tp, int tp_rank) {
    char tps[8];
    snprintf(tps, sizeof tps, "%d", tp);
    char *argv[] = {"--num-layers",
                    "1",
                    "--hidden-size",
                    "32",
                    "--num-attention-heads",
                    "8",
                    "--group-query-attention",
                    "--num-query-groups",
                    "4",
                    "--swiglu",
                    "--ffn-hidden-size",
                    "24",
                    "--untie-embeddings-and-output-weights",
                    "--position-embedding-type",
                    "rope",
                    "--seq-length",
                    "8",
                    "--vocab-size",
                    "32",
                    "--make-vocab-size-divisible-by",
                    "8",
                    "--train-iters",
                    "1",
                    "--lr",
                    "1e-3",
                    "--mock-data",
                    "--tensor-model-parallel-size",
                    tps};
    mg_config c;
    bool help;
    mg_config_defaults(&c);
    MG_CHECK(mg_flags_parse(&c, (int)(sizeof argv / sizeof *argv), argv, &help));
    c.world_size = tp;
    MG_CHECK(mg_config_validate(&c));
    return mg_gpt_build(g, &c, tp_rank, 0, 0);
}

/* Element j of a parameter holds its global index (+ 0.5 for the second tensor kind), so every
 * misplaced element shows. */
static void fill_global(const mg_param_meta *m, float *out, float plus) {
    for (int64_t j = 0; j < m->numel; j++) out[j] = (float)mg_param_global_index(m, j) + plus;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

/* Writes a store from a TP-2 layout: rank r writes its weights whole and its "moments" as two
 * runs [0, cut) and [cut, numel) from two different writer ids (as two data-parallel shards);
 * a replicated parameter only from rank 0 (a second copy would overlap the first). */
static mg_status write_tp2(const char *dir) {
    for (int r = 0; r < 2; r++) {
        mg_gpt g;
        MG_CHECK(tiny_model(&g, 2, r));
        const int n = g.params.n;
        mg_ckpt_piece *w = calloc((size_t)n, sizeof *w), *m[2];
        m[0] = calloc((size_t)n, sizeof **m);
        m[1] = calloc((size_t)n, sizeof **m);
        float *data = calloc(g.params.numel, sizeof(float)),
              *mom = calloc(g.params.numel, sizeof(float));
        char(*names)[160] = calloc((size_t)n, sizeof *names);
        int k = 0;
        for (int i = 0; i < n; i++) {
            const mg_param_meta *p = &g.params.p[i];
            if (r > 0 && p->tp_split_dim < 0) continue;
            fill_global(p, data + p->offset, 0);
            fill_global(p, mom + p->offset, 0.5f);
            snprintf(names[k], sizeof names[k], "opt.%s", p->name);
            w[k] = (mg_ckpt_piece){p->name, p, 0, p->numel, data + p->offset};
            /* an uneven cut that falls inside a row and, for SwiGLU, inside a chunk */
            const int64_t cut = p->numel / 3 + 1;
            m[0][k] = (mg_ckpt_piece){names[k], p, 0, cut, mom + p->offset};
            m[1][k] = (mg_ckpt_piece){names[k], p, cut, p->numel, mom + p->offset + cut};
            k++;
        }
        mg_status st = mg_ckpt_store_write(dir, 3 * r, w, k);
        if (st == MG_OK) st = mg_ckpt_store_write(dir, 3 * r + 1, m[0], k);
        if (st == MG_OK) st = mg_ckpt_store_write(dir, 3 * r + 2, m[1], k);
        free(w), free(m[0]), free(m[1]), free(data), free(mom), free(names);
        mg_gpt_free(&g);
        MG_CHECK(st);
    }
    return mg_ckpt_store_index(dir, 6);
}

/* Reads the whole store under TP tp (each rank's weights, and the moments as the run [a, b) of
 * every parameter with a = numel / 4) and counts the elements that differ from their global
 * index. */
static mg_status read_back(const char *dir, int tp, int64_t *wrong) {
    mg_ckpt_store *s;
    MG_CHECK(mg_ckpt_store_open(dir, &s));
    mg_status st = MG_OK;
    for (int r = 0; st == MG_OK && r < tp; r++) {
        mg_gpt g;
        st = tiny_model(&g, tp, r);
        if (st != MG_OK) break;
        float *buf = calloc(g.params.numel, sizeof(float));
        float *want = calloc(g.params.numel, sizeof(float));
        for (int i = 0; st == MG_OK && i < g.params.n; i++) {
            const mg_param_meta *p = &g.params.p[i];
            char name[160];
            snprintf(name, sizeof name, "opt.%s", p->name);
            const int64_t a = p->numel / 4;
            st = mg_ckpt_store_read(s, &(mg_ckpt_piece){p->name, p, 0, p->numel, buf});
            fill_global(p, want, 0);
            for (int64_t j = 0; st == MG_OK && j < p->numel; j++) *wrong += buf[j] != want[j];
            if (st == MG_OK)
                st = mg_ckpt_store_read(s, &(mg_ckpt_piece){name, p, a, p->numel, buf});
            fill_global(p, want, 0.5f);
            for (int64_t j = a; st == MG_OK && j < p->numel; j++) *wrong += buf[j - a] != want[j];
        }
        free(buf), free(want);
        mg_gpt_free(&g);
    }
    mg_ckpt_store_close(s);
    return st;
}

MG_TEST(checkpoint_store_reshards_tp2_to_tp1_and_tp4) {
    char dir[] = "/tmp/mg_ckpt_store_XXXXXX";
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    MG_EXPECT_OK(write_tp2(dir));
    int64_t wrong = 0;
    MG_EXPECT_OK(read_back(dir, 1, &wrong));
    MG_EXPECT(wrong == 0, "TP 1: %lld elements misplaced", (long long)wrong);
    MG_EXPECT_OK(read_back(dir, 2, &wrong));
    MG_EXPECT(wrong == 0, "TP 2: %lld elements misplaced", (long long)wrong);
    MG_EXPECT_OK(read_back(dir, 4, &wrong));
    MG_EXPECT(wrong == 0, "TP 4: %lld elements misplaced", (long long)wrong);
    char path[256];
    snprintf(path, sizeof path, "%s/rank-00000.json", dir);
    MG_EXPECT(access(path, F_OK) != 0, "the rank lists were not removed after the merge");
    nftw(dir, remove_entry, 4, FTW_DEPTH | FTW_PHYS);
}

/* Runs fn on a fresh TP-2 store and expects reading it under TP 1 to fail with `want`. */
static void expect_damage(mg_test_ctx *t, const char *what, void (*fn)(const char *dir),
                          mg_status code, const char *want) {
    char dir[] = "/tmp/mg_ckpt_store_XXXXXX";
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    MG_EXPECT_OK(write_tp2(dir));
    fn(dir);
    int64_t wrong = 0;
    mg_status st = read_back(dir, 1, &wrong);
    MG_EXPECT(st == code && strstr(mg_error_message(), want) && !strchr(mg_error_message(), '\n'),
              "%s: got %s '%s', want %s with '%s'", what, mg_status_name(st), mg_error_message(),
              mg_status_name(code), want);
    mg_error_clear();
    nftw(dir, remove_entry, 4, FTW_DEPTH | FTW_PHYS);
}

static void truncate_file(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/rank-00003.safetensors", dir);
    FILE *f = fopen(path, "r+");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    if (truncate(path, n - 10)) perror(path);
}

static void flip_byte(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/rank-00003.safetensors", dir);
    FILE *f = fopen(path, "r+");
    fseek(f, -7, SEEK_END);
    int c = fgetc(f);
    fseek(f, -7, SEEK_END);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static void remove_file(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/rank-00004.safetensors", dir);
    remove(path);
}

static void break_json(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/index.json", dir);
    FILE *f = fopen(path, "r+");
    fputs("[[", f);
    fclose(f);
}

/* index.json through cJSON: edit(root), written back */
static void edit_index(const char *dir, void (*edit)(cJSON *)) {
    char path[256], *text;
    snprintf(path, sizeof path, "%s/index.json", dir);
    if (mg_file_read(path, &text, NULL) != MG_OK) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    edit(root);
    text = cJSON_Print(root);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    cJSON_free(text);
    cJSON_Delete(root);
}

/* the first tensor's pieces */
static cJSON *first_pieces(cJSON *root) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tensors")->child, "pieces");
}

static void drop_last_piece(cJSON *root) {
    cJSON *pieces = first_pieces(root);
    cJSON_DeleteItemFromArray(pieces, cJSON_GetArraySize(pieces) - 1);
}

static void rename_file(cJSON *root) {
    cJSON_ReplaceItemInObject(first_pieces(root)->child, "file",
                              cJSON_CreateString("rank-00042.safetensors"));
}

static void piece_outside(cJSON *root) {
    cJSON *off = cJSON_GetObjectItem(first_pieces(root)->child, "offset");
    cJSON_ReplaceItemInArray(off, 0, cJSON_CreateNumber(1e6));
}

static void piece_without_hash(cJSON *root) {
    cJSON_DeleteItemFromObject(first_pieces(root)->child, "xxh3");
}

static void outside(const char *dir) {
    edit_index(dir, piece_outside);
}

static void no_hash(const char *dir) {
    edit_index(dir, piece_without_hash);
}

static void drop_piece(const char *dir) {
    edit_index(dir, drop_last_piece);
}

static void unknown_file(const char *dir) {
    edit_index(dir, rename_file);
}

MG_TEST(checkpoint_store_damage_is_one_line_naming_file_and_tensor) {
    expect_damage(t, "truncated", truncate_file, MG_ERR_FORMAT, "rank-00003.safetensors is ");
    expect_damage(t, "truncated", truncate_file, MG_ERR_FORMAT, "truncated or replaced (tensor '");
    expect_damage(t, "flipped byte", flip_byte, MG_ERR_FORMAT, "fails its checksum");
    expect_damage(t, "missing file", remove_file, MG_ERR_FORMAT,
                  "rank-00004.safetensors is missing");
    expect_damage(t, "bad JSON", break_json, MG_ERR_FORMAT, "index.json: not valid JSON");
    expect_damage(t, "unknown file", unknown_file, MG_ERR_FORMAT, "which 'files' lacks");
    expect_damage(t, "missing piece", drop_piece, MG_ERR_FORMAT,
                  "a piece is missing from index.json");
    expect_damage(t, "piece outside", outside, MG_ERR_FORMAT, "lies outside its shape");
    expect_damage(t, "no checksum", no_hash, MG_ERR_FORMAT,
                  "lacks file, key, start, offset, block, range or xxh3");
}

MG_TEST(params_relayout_refuses_overlap) {
    mg_gpt g;
    MG_EXPECT_OK(tiny_model(&g, 1, 0));
    if (t->failures) return;
    int n = g.params.n;
    size_t *off = calloc((size_t)n, sizeof *off), total = 0;
    /* reverse order, packed: valid */
    for (int i = n - 1; i >= 0; i--) {
        off[i] = total;
        total += (size_t)g.params.p[i].numel;
    }
    MG_EXPECT_OK(mg_params_relayout(&g.params, off, total));
    MG_EXPECT(g.params.numel == total && g.params.p[n - 1].offset == 0, "relayout not applied");
    size_t kept = g.params.p[0].offset;
    off[0] += 1; /* parameter 0 (the last one in the buffer) now ends past it */
    MG_EXPECT_ERROR(mg_params_relayout(&g.params, off, total), MG_ERR_INTERNAL,
                    "ends past the buffer");
    off[0] -= 1;
    off[1] = off[0]; /* two parameters at one place */
    MG_EXPECT_ERROR(mg_params_relayout(&g.params, off, total), MG_ERR_INTERNAL,
                    "overlaps the next parameter");
    MG_EXPECT(g.params.p[0].offset == kept && g.params.numel == total,
              "a refused relayout changed the table");
    free(off);
    mg_gpt_free(&g);
}
