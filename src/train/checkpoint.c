#include "train/checkpoint.h"
#include "core/clock.h"

#include "core/env.h"
#include "core/file.h"
#include "config/flags.h"
#include "core/log.h"
#include "core/safetensors.h"
#include "train/checkpoint_store.h"
#include "train/checkpoint_v1.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *TRACKER = "latest_checkpointed_iteration.txt";

static mg_status make_dir(const char *path) {
    if (mkdir(path, 0755) == 0 || errno == EEXIST) return MG_OK;
    return MG_FAIL(MG_ERR_IO, "cannot create directory %s: %s", path, strerror(errno));
}

static mg_status fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return MG_FAIL(MG_ERR_IO, "cannot open %s to flush it: %s", path, strerror(errno));
    int rc = fsync(fd);
    close(fd);
    if (rc != 0 && errno != EINVAL)
        return MG_FAIL(MG_ERR_IO, "cannot flush %s: %s", path, strerror(errno));
    return MG_OK;
}

/* Writes text to path through a temporary and a rename. */
static mg_status write_text_atomic(const char *path, const char *text) {
    const void *parts[1] = {text};
    size_t sizes[1] = {strlen(text)};
    return mg_file_write_atomic(path, parts, sizes, 1);
}

static mg_status write_state(const char *path, const mg_train_state *s, const mg_config *cfg,
                             const mg_checkpoint_tensors *t) {
    char *config_json = NULL;
    MG_CHECK(mg_config_to_json(cfg, &config_json));
    /* the lr schedule's values (train/lr_schedule.h), when the saver has a schedule */
    char scheduler_json[768] = "", obj[700];
    if (s->lr_scheduler.present) {
        mg_status st = mg_lr_saved_to_json(&s->lr_scheduler, obj, sizeof obj);
        if (st != MG_OK) {
            free(config_json);
            return st;
        }
        snprintf(scheduler_json, sizeof scheduler_json, "  \"opt_param_scheduler\": %s,\n", obj);
    }
    /* the dropout streams' offset (model/rng.h), unless --no-save-rng */
    char offset_json[48] = "";
    if (!cfg->no_save_rng)
        snprintf(offset_json, sizeof offset_json, ", \"offset\": %" PRIu64, s->rng_offset);
    size_t cap = strlen(config_json) + strlen(scheduler_json) + 1024;
    char *text = malloc(cap);
    if (!text) {
        free(config_json);
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the checkpoint state");
    }
    snprintf(text, cap,
             "{\n  \"format\": \"megatron.c checkpoint\", \"version\": 2,\n"
             "  \"iteration\": %" PRId64 ",\n  \"consumed_train_samples\": %" PRId64 ",\n"
             "  \"consumed_valid_samples\": %" PRId64 ",\n  \"lr_num_steps\": %" PRId64 ",\n"
             "  \"optimizer_step\": %" PRId64 ",\n  \"optimizer\": %s,\n"
             "  \"grad_scaler\": {\"scale\": %.9g, \"growth_tracker\": %" PRId64
             ", \"hysteresis_tracker\": %" PRId64 "},\n"
             "%s" /* "opt_param_scheduler" */
             "  \"layout\": {\"tensor\": %d, \"pipeline\": %d, \"data\": %d},\n"
             "  \"rng\": {\"generator\": \"philox4x32-10\", \"seed\": %" PRId64 "%s},\n"
             "  \"config\": %s\n}\n",
             s->iteration, s->consumed_train_samples, s->consumed_valid_samples, s->lr_num_steps,
             s->optimizer_step, t->optimizer ? "true" : "false", s->loss_scale, s->growth_tracker,
             s->hysteresis_tracker, scheduler_json, t->tp_size, t->n_stages, t->dp_size, cfg->seed,
             offset_json, config_json);
    free(config_json);
    mg_status st = write_text_atomic(path, text);
    free(text);
    return st;
}

static void iter_dir(char *out, size_t cap, const char *dir, int64_t it) {
    snprintf(out, cap, "%s/iter_%07" PRId64, dir, it);
}

/* Fault injection for the crash-safety tests, at the named point of a save: MG_FAULT_CHECKPOINT
 * "after-model" fails there as a full disk would; "kill-<point>" dies there as kill -9 would. */
static mg_status fault(const char *point, const char *tmp) {
    const char *f = mg_env_str("MG_FAULT_CHECKPOINT", "");
    if (!strncmp(f, "kill-", 5) && !strcmp(f + 5, point)) raise(SIGKILL);
    if (strcmp(f, point) || strcmp(point, "after-model")) return MG_OK;
    return MG_FAIL(MG_ERR_IO,
                   "cannot write the optimizer state in %s: injected fault "
                   "(MG_FAULT_CHECKPOINT=after-model)",
                   tmp);
}

/* Whether this rank writes parameter p's weights (moments: false) or moments (true). */
static bool writes(const mg_checkpoint_tensors *t, const mg_param_meta *p, bool moments) {
    const int k = p->expert ? 1 : 0;
    const bool mine = t->owns[k] || (moments && t->sharded[k]);
    return mine && !p->shared && (p->tp_split_dim >= 0 || t->tp_rank == 0);
}

/* The pieces one rank writes or reads: names and the expert biases' metadata stay alive with it. */
typedef struct {
    mg_ckpt_piece *p;
    char (*names)[MG_ST_NAME_CAP];
    mg_param_meta bias; /* an expert bias: E values, whole on every rank */
    mg_param_meta fp8;  /* an fp8 layer's scaling state, whole on every rank */
    int n;
} piece_list;

static void piece_list_free(piece_list *l) {
    free(l->p);
    free(l->names);
}

static void add(piece_list *l, const char *prefix, const char *name, const mg_param_meta *m,
                int64_t a, int64_t b, float *data) {
    char *nm = l->names[l->n];
    snprintf(nm, MG_ST_NAME_CAP, "%s%s", prefix, name);
    l->p[l->n++] = (mg_ckpt_piece){nm, m, a, b, data};
}

/* The metadata of a vector of n values that every rank holds whole. */
static mg_param_meta whole_vector(int64_t n) {
    return (mg_param_meta){
        .ndim = 1, .shape = {n}, .global_shape = {n}, .numel = n, .tp_split_dim = -1};
}

/* Every piece of this rank's state (t), or those it writes (writing). */
static mg_status list_pieces(const mg_gpt *g, const mg_checkpoint_tensors *t, const float *params,
                             bool optimizer, bool writing, piece_list *l) {
    const int cap = g->params.n + 2 * (optimizer ? t->n_pieces : 0) + t->n_bias + t->n_fp8 + 1;
    memset(l, 0, sizeof *l);
    l->p = calloc((size_t)cap, sizeof *l->p);
    l->names = calloc((size_t)cap, sizeof *l->names);
    if (!l->p || !l->names) return MG_FAIL(MG_ERR_NOMEM, "out of memory listing the checkpoint");
    for (int i = 0; i < g->params.n; i++) {
        const mg_param_meta *p = &g->params.p[i];
        if (!writing || writes(t, p, false))
            add(l, "", mg_gpt_saved_name(p), p, 0, p->numel, (float *)params + p->offset);
    }
    for (int i = 0; optimizer && i < t->n_pieces; i++) {
        const mg_optim_piece *pc = &t->pieces[i];
        const mg_param_meta *p = &g->params.p[pc->index];
        if (writing && !writes(t, p, true)) continue;
        add(l, "optimizer.exp_avg.", mg_gpt_saved_name(p), p, pc->param_start, pc->param_end,
            t->exp_avg + pc->local);
        add(l, "optimizer.exp_avg_sq.", mg_gpt_saved_name(p), p, pc->param_start, pc->param_end,
            t->exp_avg_sq + pc->local);
    }
    /* model state that every rank holding the layer has alike (the expert bias, fp8 scaling):
     * whole vectors, written by one of them */
    const bool state = !writing || (t->owns[0] && t->tp_rank == 0);
    l->bias = whole_vector(t->n_experts);
    const bool biases = t->expert_bias && state;
    for (int k = 0; biases && k < t->n_bias; k++) {
        char name[MG_ST_NAME_CAP];
        mg_gpt_moe_bias_name(g, k, name, sizeof name);
        add(l, "", name, &l->bias, 0, t->n_experts, t->expert_bias + (size_t)k * t->n_experts);
    }
    l->fp8 = whole_vector(t->fp8_width); /* alike: the amaxes are reduced */
    const bool fp8 = t->fp8 && state;
    for (int k = 0; fp8 && k < t->n_fp8; k++) {
        char name[MG_ST_NAME_CAP];
        snprintf(name, sizeof name, "decoder.layers.%d.fp8_scaling", t->fp8_layers[k]);
        add(l, "", name, &l->fp8, 0, t->fp8_width, t->fp8 + (size_t)k * t->fp8_width);
    }
    return MG_OK;
}

/* The fp8 scaling states a checkpoint saved without fp8 lacks, or holds for another number of
 * fp8 linears per layer (saved before the routed experts computed in fp8, or the other way):
 * dropped from the pieces to read (the scales stay at 1), with one line each. */
static void drop_unmatched_fp8(const mg_ckpt_store *store, piece_list *l, const char *base) {
    int k = 0, absent = 0, other = 0;
    for (int i = 0; i < l->n; i++) {
        if (l->p[i].meta == &l->fp8) {
            const int64_t rows = mg_ckpt_store_rows(store, l->p[i].name);
            if (rows < 0 || rows != l->p[i].b - l->p[i].a) {
                rows < 0 ? absent++ : other++;
                continue;
            }
        }
        if (k != i) {
            memcpy(l->names[k], l->names[i], sizeof l->names[k]);
            l->p[k] = l->p[i];
            l->p[k].name = l->names[k];
        }
        k++;
    }
    l->n = k;
    if (absent)
        mg_log_info("> %s: no fp8 scaling state for %d fp8 layers (saved without fp8): their "
                    "scales start at 1",
                    base, absent);
    if (other)
        mg_log_warn("%s: the fp8 scaling state of %d fp8 layers has another number of fp8 linears "
                    "per layer (saved by a build whose MoE experts were not in fp8, or the other "
                    "way): their scales start at 1, so the resume is not exact",
                    base, other);
}

/* This rank's file of the checkpoint (and, from rank 0, the state), into tmp. */
static mg_status write_parts(const char *tmp, int id, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t, double *bytes) {
    piece_list l;
    mg_status st = list_pieces(g, t, t->params, t->optimizer, true, &l);
    *bytes = 0;
    for (int i = 0; st == MG_OK && i < l.n; i++) *bytes += 4.0 * (double)(l.p[i].b - l.p[i].a);
    if (st == MG_OK) st = mg_ckpt_store_write(tmp, id, l.p, l.n);
    piece_list_free(&l);
    if (st == MG_OK) st = fault("after-model", tmp);
    char path[2200];
    snprintf(path, sizeof path, "%s/state.json", tmp);
    if (st == MG_OK && id == 0) st = write_state(path, s, cfg, t);
    return st;
}

/* One host value over group c: broadcast from its rank 0, or the maximum. A group that moves
 * device buffers (NCCL) goes through the groups' device scratch; copy_d2h waits for it. */
static mg_status exchange(const mg_checkpoint_groups *gr, mg_comm *c, int64_t *v, bool bcast) {
    if (!mg_comm_device_buffers(c))
        return bcast ? mg_comm_broadcast(c, v, 1, MG_I64, 0, NULL)
                     : mg_comm_all_reduce(c, v, v, 1, MG_I64, MG_REDUCE_MAX, NULL);
    mg_backend *be = gr->be;
    if (!be || !gr->scratch)
        return MG_FAIL(MG_ERR_INTERNAL, "checkpoint groups on device buffers need a scratch");
    void *stream = be->stream_handle ? be->stream_handle(be, MG_STREAM_COMPUTE) : NULL;
    MG_CHECK(be->copy_h2d(be, gr->scratch, v, sizeof *v));
    MG_CHECK(
        bcast ? mg_comm_broadcast(c, gr->scratch, 1, MG_I64, 0, stream)
              : mg_comm_all_reduce(c, gr->scratch, gr->scratch, 1, MG_I64, MG_REDUCE_MAX, stream));
    return be->copy_d2h(be, v, gr->scratch, sizeof *v);
}

/* v over every rank of the groups, from the world's rank 0 (bcast) or the maximum: over tp,
 * then pp, then dp, which together span the grid (rank 0 of each is in the first's). */
static mg_status over_groups(const mg_checkpoint_groups *gr, int64_t *v, bool bcast) {
    mg_comm *order[3] = {gr ? gr->tp : NULL, gr ? gr->pp : NULL, gr ? gr->dp : NULL};
    for (int i = 0; i < 3; i++)
        if (order[i]) MG_CHECK(exchange(gr, order[i], v, bcast));
    return MG_OK;
}

/* Every member of the groups learns the worst of their statuses. */
static mg_status agree(const mg_checkpoint_groups *gr, mg_status mine, bool *all_ok) {
    int64_t bad = mine != MG_OK;
    MG_CHECK(over_groups(gr, &bad, false));
    *all_ok = !bad;
    return MG_OK;
}

/* Rank 0: the index, then iter_N.tmp becomes iter_N (an older one of the same iteration is
 * replaced only now), then the tracker names it. */
static mg_status commit(const char *dir, const char *tmp, const char *final, int64_t it,
                        int n_ids) {
    char old[2100], path[2200];
    MG_CHECK(mg_ckpt_store_index(tmp, n_ids));
    MG_CHECK(fsync_path(tmp));
    MG_CHECK(fault("before-rename", tmp));
    snprintf(old, sizeof old, "%s.old-%d", final, (int)getpid());
    bool had_old = rename(final, old) == 0;
    if (rename(tmp, final) != 0) {
        int e = errno;
        if (had_old) rename(old, final);
        return MG_FAIL(MG_ERR_IO, "cannot rename %s to %s: %s", tmp, final, strerror(e));
    }
    if (had_old) mg_file_remove_dir(old);
    MG_CHECK(fsync_path(dir));
    MG_CHECK(fault("before-tracker", tmp));
    char text[32];
    snprintf(text, sizeof text, "%" PRId64 "\n", it);
    snprintf(path, sizeof path, "%s/%s", dir, TRACKER);
    return write_text_atomic(path, text);
}

struct mg_checkpoint_pending {
    char dir[2048], final[2048], tmp[2100];
    mg_train_state s;
    const mg_config *cfg;
    const mg_gpt *g;
    const mg_checkpoint_tensors *t;
    mg_checkpoint_groups groups;
    int id, n_ids;
    bool threaded, joined;
    pthread_t thread;
    atomic_bool written; /* this rank's writer finished */
    mg_status st;        /* its outcome, and its message (errors are per thread) */
    char message[1024];
    double seconds, bytes; /* this rank's writing */
};

static void *writer(void *arg) {
    mg_checkpoint_pending *p = arg;
    double t0 = mg_clock_seconds();
    p->st = write_parts(p->tmp, p->id, &p->s, p->cfg, p->g, p->t, &p->bytes);
    if (p->st != MG_OK) snprintf(p->message, sizeof p->message, "%s", mg_error_message());
    p->seconds = mg_clock_seconds() - t0;
    atomic_store(&p->written, true);
    return NULL;
}

mg_status mg_checkpoint_save_async(const char *dir, const mg_train_state *s, const mg_config *cfg,
                                   const mg_gpt *g, const mg_checkpoint_tensors *t,
                                   const mg_checkpoint_groups *gr, bool background,
                                   mg_checkpoint_pending **out) {
    *out = NULL;
    mg_checkpoint_pending *p = calloc(1, sizeof *p);
    if (!p) return MG_FAIL(MG_ERR_NOMEM, "out of memory saving a checkpoint");
    const int T = t->tp_size > 1 ? t->tp_size : 1, D = t->dp_size > 1 ? t->dp_size : 1;
    const int P = t->n_stages > 1 ? t->n_stages : 1;
    *p = (mg_checkpoint_pending){
        .s = *s, .cfg = cfg, .g = g, .t = t, .groups = gr ? *gr : (mg_checkpoint_groups){0}};
    p->id = t->tp_rank + T * (t->dp_rank + D * t->stage);
    p->n_ids = T * D * P;
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    iter_dir(p->final, sizeof p->final, dir, s->iteration);
    /* rank 0 (the world's) makes the temporary directory; its PID names it for everyone (over
     * its tensor-parallel group, then the pipeline groups of those, then every data-parallel
     * group) */
    int64_t pid = getpid();
    mg_status st = MG_OK;
    if (p->id == 0) {
        snprintf(p->tmp, sizeof p->tmp, "%s.tmp-%" PRId64, p->final, pid);
        st = make_dir(dir);
        mg_file_remove_dir(p->tmp);
        if (st == MG_OK) st = make_dir(p->tmp);
    }
    /* everyone hears whether it could before anyone writes into it */
    bool all_ok = false;
    MG_CHECK(agree(gr, st, &all_ok));
    if (!all_ok) {
        free(p);
        return st != MG_OK ? st
                           : MG_FAIL(MG_ERR_IO,
                                     "checkpoint %s not saved: rank 0 could not create "
                                     "its directory (its own error says why)",
                                     dir);
    }
    MG_CHECK(over_groups(&p->groups, &pid, true));
    snprintf(p->tmp, sizeof p->tmp, "%s.tmp-%" PRId64, p->final, pid);
    (void)mg_env_str("MG_FAULT_CHECKPOINT", ""); /* read once here, not first in the thread */
    if (background && pthread_create(&p->thread, NULL, writer, p) == 0) {
        p->threaded = true;
    } else {
        writer(p);
    }
    *out = p;
    return MG_OK;
}

mg_status mg_checkpoint_poll(mg_checkpoint_pending *p, bool *done) {
    /* done when every rank's writer is: the worst "not yet" over the groups */
    MG_CHECK(agree(&p->groups, atomic_load(&p->written) ? MG_OK : MG_ERR_INTERNAL, done));
    return MG_OK;
}

static void join(mg_checkpoint_pending *p) {
    if (p->threaded && !p->joined) pthread_join(p->thread, NULL);
    p->joined = true;
}

void mg_checkpoint_pending_stats(const mg_checkpoint_pending *p, int64_t *iteration,
                                 double *seconds, double *bytes) {
    *iteration = p->s.iteration;
    *seconds = p->seconds;
    *bytes = p->bytes;
}

mg_status mg_checkpoint_finish(mg_checkpoint_pending *p) {
    join(p);
    mg_status st = p->st;
    if (st != MG_OK) st = MG_FAIL(st, "%s", p->message);
    bool all_ok;
    const bool first = p->id == 0;
    MG_CHECK(agree(&p->groups, st, &all_ok)); /* keeps this rank's error message */
    if (!all_ok) {
        if (first) mg_file_remove_dir(p->tmp);
        if (st == MG_OK)
            return MG_FAIL(MG_ERR_IO,
                           "checkpoint %s not saved: another rank could not write its part "
                           "(its own error says why)",
                           p->final);
        return st;
    }
    if (first) {
        st = commit(p->dir, p->tmp, p->final, p->s.iteration, p->n_ids);
        if (st != MG_OK) mg_file_remove_dir(p->tmp);
    }
    /* nobody returns before rank 0 has committed, and everyone hears whether it could */
    MG_CHECK(agree(&p->groups, st, &all_ok));
    if (!all_ok && st == MG_OK)
        return MG_FAIL(MG_ERR_IO,
                       "checkpoint %s not saved: rank 0 could not commit it (its own "
                       "error says why)",
                       p->final);
    return st;
}

void mg_checkpoint_pending_free(mg_checkpoint_pending *p) {
    if (!p) return;
    join(p);
    free(p);
}

mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t,
                             const mg_checkpoint_groups *gr) {
    mg_checkpoint_pending *p;
    MG_CHECK(mg_checkpoint_save_async(dir, s, cfg, g, t, gr, false, &p));
    mg_status st = mg_checkpoint_finish(p);
    mg_checkpoint_pending_free(p);
    return st;
}

mg_status mg_checkpoint_save_weights(const char *dir, const mg_config *cfg, const mg_gpt *g,
                                     const float *params) {
    const mg_train_state s = {0};
    const mg_checkpoint_tensors t = {.params = (float *)params, .owns = {true, true}};
    return mg_checkpoint_save(dir, &s, cfg, g, &t, NULL);
}

mg_status mg_checkpoint_latest(const char *dir, int64_t *iteration) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, TRACKER);
    *iteration = -1;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return MG_OK;
        return MG_FAIL(MG_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++) /* keep the error message on one line */
        if (buf[i] < ' ' && buf[i] != '\n') buf[i] = '?';
    char *end;
    long long it = strtoll(buf, &end, 10);
    while (*end == '\n' || *end == ' ' || *end == '\r') end++;
    if (end == buf || *end || it < 0) {
        buf[strcspn(buf, "\n")] = 0;
        return MG_FAIL(MG_ERR_FORMAT, "%s: expected an iteration number, found '%.20s'", path, buf);
    }
    *iteration = it;
    return MG_OK;
}

static mg_status json_i64(const cJSON *root, const char *key, const char *path, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v)) return MG_FAIL(MG_ERR_FORMAT, "%s: missing integer '%s'", path, key);
    *out = (int64_t)v->valuedouble;
    return MG_OK;
}

/* The checkpoint must describe the same model as the command line. */
static mg_status check_same_model(const mg_config *saved, const mg_config *now, const char *path) {
#define SAME(field, flag)                                                                          \
    if (saved->field != now->field)                                                                \
        return MG_FAIL(MG_ERR_USAGE,                                                               \
                       "%s was saved with " flag " %lld but this run has %lld; "                   \
                       "use the checkpoint's value",                                               \
                       path, (long long)saved->field, (long long)now->field);
    SAME(num_layers, "--num-layers")
    SAME(hidden_size, "--hidden-size")
    SAME(ffn_hidden_size, "--ffn-hidden-size")
    SAME(num_attention_heads, "--num-attention-heads")
    SAME(num_query_groups, "--num-query-groups")
    SAME(kv_channels, "--kv-channels")
    SAME(max_position_embeddings, "--max-position-embeddings")
    SAME(vocab_size, "--vocab-size")
    SAME(make_vocab_size_divisible_by, "--make-vocab-size-divisible-by")
    SAME(position_embedding, "--position-embedding-type (enum)")
    SAME(normalization, "--normalization (enum)")
    SAME(apply_layernorm_1p, "--apply-layernorm-1p") /* the stored norm weights' meaning */
    SAME(swiglu, "--swiglu")
    SAME(disable_bias_linear, "--disable-bias-linear")
    SAME(untie_embeddings, "--untie-embeddings-and-output-weights")
#undef SAME
    return MG_OK;
}

static mg_status parse_state(const char *path, cJSON **root) {
    char *text;
    MG_CHECK(mg_file_read(path, &text, NULL));
    *root = cJSON_Parse(text);
    free(text);
    return *root ? MG_OK : MG_FAIL(MG_ERR_FORMAT, "%s: not valid JSON", path);
}

static mg_status saved_config(const cJSON *root, const char *path, mg_config *saved) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (!cJSON_IsObject(c)) return MG_FAIL(MG_ERR_FORMAT, "%s: missing the 'config' object", path);
    mg_config_defaults(saved);
    return mg_config_from_cjson(saved, c);
}

/* "pipeline_stages" and "model_files" of a state.json (absent before pipeline and expert
 * parallelism: 1 stage, one file per stage). */
static mg_status json_stages(const cJSON *root, const char *path, int *n_stages, int *n_files) {
    const char *keys[2] = {"pipeline_stages", "model_files"};
    int64_t v[2] = {1, 0};
    for (int k = 0; k < 2; k++) {
        if (cJSON_GetObjectItemCaseSensitive(root, keys[k]))
            MG_CHECK(json_i64(root, keys[k], path, &v[k]));
        else if (k == 1)
            v[1] = v[0];
        if (v[k] < 1 || v[k] > 1 << 16)
            return MG_FAIL(MG_ERR_FORMAT, "%s: %s %" PRId64 " is out of range", path, keys[k],
                           v[k]);
    }
    *n_stages = (int)v[0];
    *n_files = (int)v[1];
    return MG_OK;
}

/* The saved state: counters, and the format (version 1: its stage and file counts). */
typedef struct {
    int version, n_shards, n_stages, n_files;
    bool optimizer;
} saved_format;

static mg_status load_state(const char *path, mg_train_state *s, const mg_config *cfg,
                            saved_format *f) {
    cJSON *root = NULL;
    MG_CHECK(parse_state(path, &root));
    int64_t version = 1, shards = 0;
    mg_status st = MG_OK;
    if (cJSON_GetObjectItemCaseSensitive(root, "version"))
        st = json_i64(root, "version", path, &version);
    if (st == MG_OK && version != 1 && version != 2)
        st =
            MG_FAIL(MG_ERR_FORMAT,
                    "%s: checkpoint format version %" PRId64 " is newer than this megatron.c reads "
                    "(1 and 2); use a newer build",
                    path, version);
    if (st == MG_OK) st = json_i64(root, "iteration", path, &s->iteration);
    if (st == MG_OK)
        st = json_i64(root, "consumed_train_samples", path, &s->consumed_train_samples);
    if (st == MG_OK)
        st = json_i64(root, "consumed_valid_samples", path, &s->consumed_valid_samples);
    if (st == MG_OK) st = json_i64(root, "lr_num_steps", path, &s->lr_num_steps);
    if (st == MG_OK) st = json_i64(root, "optimizer_step", path, &s->optimizer_step);
    /* the loss scaler's state: absent before it existed (then no scale: loss_scale 0) */
    const cJSON *gs = cJSON_GetObjectItemCaseSensitive(root, "grad_scaler");
    s->loss_scale = 0;
    s->growth_tracker = s->hysteresis_tracker = 0;
    if (st == MG_OK && gs) {
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(gs, "scale");
        if (!cJSON_IsNumber(sc) || !(sc->valuedouble >= 0))
            st = MG_FAIL(MG_ERR_FORMAT, "%s: grad_scaler.scale is missing or negative", path);
        else
            s->loss_scale = sc->valuedouble;
        if (st == MG_OK) st = json_i64(gs, "growth_tracker", path, &s->growth_tracker);
        if (st == MG_OK) st = json_i64(gs, "hysteresis_tracker", path, &s->hysteresis_tracker);
    }
    /* the dropout streams' offset: absent before it was kept, or with --no-save-rng */
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(root, "rng");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(rng, "offset");
    s->rng_offset = 0;
    s->rng_saved = off != NULL;
    if (st == MG_OK && off &&
        (!cJSON_IsNumber(off) ||
         !(off->valuedouble >= 0 && off->valuedouble <= 9007199254740992.0) ||
         off->valuedouble != floor(off->valuedouble)))
        st = MG_FAIL(MG_ERR_FORMAT, "%s: rng.offset is not an integer in [0, 2^53]", path);
    else if (off)
        s->rng_offset = (uint64_t)off->valuedouble;
    /* the lr schedule's values: absent before they were saved (then not checked) */
    if (st == MG_OK)
        st = mg_lr_saved_from_json(cJSON_GetObjectItemCaseSensitive(root, "opt_param_scheduler"),
                                   path, &s->lr_scheduler);
    f->version = (int)version;
    f->optimizer =
        version == 1 || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "optimizer"));
    /* version 1: absent before the distributed optimizer (one whole file) */
    if (st == MG_OK && version == 1 && cJSON_GetObjectItemCaseSensitive(root, "optimizer_shards"))
        st = json_i64(root, "optimizer_shards", path, &shards);
    if (st == MG_OK && (shards < 0 || shards > 1 << 20))
        st = MG_FAIL(MG_ERR_FORMAT, "%s: optimizer_shards %" PRId64 " is out of range", path,
                     shards);
    f->n_shards = (int)shards;
    if (st == MG_OK && version == 1) st = json_stages(root, path, &f->n_stages, &f->n_files);
    if (st == MG_OK && cfg) {
        mg_config saved;
        st = saved_config(root, path, &saved);
        if (st == MG_OK) st = check_same_model(&saved, cfg, path);
    }
    cJSON_Delete(root);
    return st;
}

mg_status mg_checkpoint_load_config(const char *dir, int64_t it, mg_config *cfg) {
    char path[2200];
    snprintf(path, sizeof path, "%s/iter_%07" PRId64 "/state.json", dir, it);
    cJSON *root = NULL;
    MG_CHECK(parse_state(path, &root));
    mg_status st = saved_config(root, path, cfg);
    cJSON_Delete(root);
    return st;
}

/* A padded vocabulary of another size (another tensor-parallel size pads to another multiple):
 * the rows both have load; rows this layout adds start from initialisation when the seed is
 * known (seed >= 0; else zero), their moments from zero; rows it lacks are dropped. */
static void vocab_rows(const mg_ckpt_store *store, const mg_gpt *g, float *params, int64_t seed,
                       const char *base) {
    bool init = false;
    for (int i = 0; i < g->params.n; i++) {
        const mg_param_meta *p = &g->params.p[i];
        const int64_t rows = p->vocab_rows ? mg_ckpt_store_rows(store, mg_gpt_saved_name(p)) : -1;
        if (rows < 0 || rows == p->global_shape[0]) continue;
        mg_log_info("> %s: %s has %" PRId64 " rows (the padded vocabulary), this layout %" PRId64
                    ": %s",
                    base, mg_gpt_saved_name(p), rows, p->global_shape[0],
                    rows > p->global_shape[0] ? "the extra padding rows are dropped"
                                              : "the new padding rows start from initialisation");
        init |= rows < p->global_shape[0] && seed >= 0;
    }
    if (init) mg_params_init(&g->params, (uint64_t)seed, params);
}

/* Version 2: the pieces of this rank's state from the store of iteration directory base. */
static mg_status load_store(const char *base, const mg_gpt *g, float *params, bool optimizer,
                            mg_checkpoint_tensors *t, int64_t seed) {
    const mg_checkpoint_tensors none = {0};
    piece_list l = {0};
    mg_ckpt_store *store = NULL;
    mg_status st = MG_OK;
    MG_CHECK_GOTO(mg_ckpt_store_open(base, &store), st, done);
    vocab_rows(store, g, params, seed, base);
    MG_CHECK_GOTO(list_pieces(g, t ? t : &none, params, optimizer, false, &l), st, done);
    drop_unmatched_fp8(store, &l, base);
    MG_CHECK_GOTO(mg_ckpt_store_read_all(store, l.p, l.n), st, done);
done:
    piece_list_free(&l);
    mg_ckpt_store_close(store);
    return st;
}

/* The state of iteration directory base (s: NULL for the weights alone). */
static mg_status load_iteration(const char *base, mg_train_state *s, const mg_config *cfg,
                                const mg_gpt *g, float *params, mg_checkpoint_tensors *t) {
    char path[2200];
    snprintf(path, sizeof path, "%s/state.json", base);
    mg_train_state ignored;
    saved_format f = {.n_stages = 1, .n_files = 1};
    MG_CHECK(load_state(path, s ? s : &ignored, cfg, &f));
    const bool want = t && t->optimizer; /* the caller asks for the moments */
    if (t) t->optimizer = f.optimizer && want;
    if (f.version == 1)
        return mg_checkpoint_v1_load(base, f.n_stages, f.n_files, f.n_shards, g, params,
                                     want ? t : NULL);
    return load_store(base, g, params, t && t->optimizer, t, cfg ? cfg->seed : -1);
}

mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params) {
    char base[2048];
    iter_dir(base, sizeof base, dir, it);
    return load_iteration(base, NULL, NULL, g, params, NULL);
}

mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t) {
    char base[2048];
    iter_dir(base, sizeof base, dir, it);
    MG_CHECK(load_iteration(base, s, cfg, g, t->params, t));
    if (s->iteration != it)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s/state.json: iteration %" PRId64 " does not match the directory name",
                       base, s->iteration);
    return MG_OK;
}
