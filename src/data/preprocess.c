/* JSONL -> indexed dataset. Contract in preprocess.h.
 *
 * Pipeline: the input is memory-mapped; the calling thread cuts it into batches of lines and puts
 * them in a ring of K slots; workers take batches in order of their sequence number, extract and
 * tokenize every line into the slot's own buffers (reused, so no allocation per line once warm);
 * the calling thread waits for the oldest batch, appends it to the writers and refills the slot.
 * Output order is input order whatever the number of workers. */
#include "data/preprocess.h"
#include "core/clock.h"

#include "data/indexed_dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { BATCH_LINES = 256, BATCH_BYTES = 1 << 20 };
enum { SLOT_FREE = 0, SLOT_PENDING, SLOT_RUNNING, SLOT_DONE };

typedef struct {
    int state;
    int64_t seq;        /* batch number */
    int64_t first_line; /* 1-based line number of line 0 */
    size_t nlines, lines_cap;
    const char **line; /* (nlines) */
    size_t *line_len;  /* (nlines) */
    size_t bytes;      /* input bytes incl. terminators */
    /* results: per line an error code, per (line, key) a token and a sequence range */
    unsigned char *err;        /* (nlines) mg_jsonl_error */
    size_t *err_col;           /* (nlines) */
    int *err_key;              /* (nlines) */
    size_t *tok_off, *seq_off; /* (nlines * nkeys + 1) prefix offsets into tokens / seqlens */
    int32_t *tokens;           /* (ntok) */
    size_t ntok, tok_cap;
    int32_t *seqlens; /* (nseq) */
    size_t nseq, seq_cap;
    mg_status status; /* a worker failure (not a line error): stops the run */
    char message[512];
} batch;

typedef struct {
    const mg_preprocess_config *c;
    const mg_tokenizer *tok;
    int32_t eod;
    batch *slots;
    int nslots;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    int64_t next_take, next_fill;
    int stop;
} pipeline;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return 0;
    *p = q, *cap = c;
    return 1;
}

static int resize(void **p, size_t n, size_t elem) {
    void *q = realloc(*p, n * elem);
    if (!q) return 0;
    *p = q;
    return 1;
}

static void batch_free(batch *b) {
    free(b->line), free(b->line_len), free(b->err), free(b->err_col), free(b->err_key);
    free(b->tok_off), free(b->seq_off), free(b->tokens), free(b->seqlens);
}

/* ---------------------------------------------------------------- worker side */

static mg_status push_seqlen(batch *b, size_t n) {
    if (n > INT32_MAX)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "line %lld: a sentence of %zu tokens exceeds int32",
                       (long long)b->first_line, n);
    if (!grow((void **)&b->seqlens, &b->seq_cap, b->nseq + 1, sizeof *b->seqlens))
        return MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
    b->seqlens[b->nseq++] = (int32_t)n;
    return MG_OK;
}

/* Megatron's Encoder.encode for one line: per key, tokenize each sentence, keep the non-empty
 * ones, append EOD to the last if the document is non-empty. */
static mg_status encode_line(pipeline *pl, batch *b, size_t i, mg_jsonl_doc *doc,
                             mg_tokenizer_worker *tw) {
    const mg_preprocess_config *c = pl->c;
    int nk = c->num_keys;
    mg_jsonl_error e = mg_jsonl_extract(doc, b->line[i], b->line_len[i], c->json_keys, nk);
    if (e == MG_JSONL_NOMEM) return MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
    b->err[i] = (unsigned char)e, b->err_col[i] = doc->err_col, b->err_key[i] = doc->err_key;
    for (int k = 0; k < nk; k++) {
        size_t r = i * (size_t)nk + (size_t)k;
        b->tok_off[r] = b->ntok, b->seq_off[r] = b->nseq;
        if (e != MG_JSONL_OK) continue;
        size_t doc_start = b->ntok;
        for (size_t s = doc->key_first[k]; s < doc->key_first[k] + doc->key_count[k]; s++) {
            size_t before = b->ntok;
            MG_CHECK(mg_tokenizer_encode(tw, doc->text + doc->str_off[s], doc->str_len[s],
                                         &b->tokens, &b->ntok, &b->tok_cap));
            if (b->ntok > before) MG_CHECK(push_seqlen(b, b->ntok - before));
        }
        if (b->ntok > doc_start && c->append_eod) {
            if (!grow((void **)&b->tokens, &b->tok_cap, b->ntok + 1, sizeof *b->tokens))
                return MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
            b->tokens[b->ntok++] = pl->eod;
            if (b->seqlens[b->nseq - 1] == INT32_MAX)
                return MG_FAIL(MG_ERR_UNSUPPORTED, "a sentence exceeds int32 tokens");
            b->seqlens[b->nseq - 1]++;
        }
    }
    return MG_OK;
}

static mg_status process_batch(pipeline *pl, batch *b, mg_jsonl_doc *doc, mg_tokenizer_worker *tw) {
    size_t nk = (size_t)pl->c->num_keys, rows = b->nlines * nk + 1;
    b->ntok = 0, b->nseq = 0;
    for (size_t i = 0; i < b->nlines; i++) MG_CHECK(encode_line(pl, b, i, doc, tw));
    b->tok_off[rows - 1] = b->ntok, b->seq_off[rows - 1] = b->nseq;
    return MG_OK;
}

static void *worker_main(void *arg) {
    pipeline *pl = arg;
    mg_jsonl_doc doc;
    memset(&doc, 0, sizeof doc);
    mg_tokenizer_worker *tw = NULL;
    mg_status create = mg_tokenizer_worker_create(pl->tok, &tw);
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (!pl->stop && pl->next_take >= pl->next_fill) pthread_cond_wait(&pl->work, &pl->mu);
        if (pl->stop) break;
        batch *b = &pl->slots[pl->next_take % pl->nslots];
        pl->next_take++;
        b->state = SLOT_RUNNING;
        pthread_mutex_unlock(&pl->mu);
        mg_status st = create;
        if (st == MG_OK) st = process_batch(pl, b, &doc, tw);
        if (st != MG_OK) snprintf(b->message, sizeof b->message, "%s", mg_error_message());
        pthread_mutex_lock(&pl->mu);
        b->status = st;
        b->state = SLOT_DONE;
        pthread_cond_broadcast(&pl->done);
    }
    pthread_mutex_unlock(&pl->mu);
    mg_jsonl_doc_free(&doc);
    mg_tokenizer_worker_free(tw);
    return NULL;
}

/* ---------------------------------------------------------------- reader / writer side */

/* Cuts the next batch from the input; *got = 0 at the end of the input. */
static mg_status fill_batch(pipeline *pl, batch *b, const char *in, size_t len, size_t *pos,
                            int64_t *line_no, int *got) {
    size_t nk = (size_t)pl->c->num_keys;
    b->nlines = 0, b->bytes = 0, b->first_line = *line_no + 1, b->status = MG_OK;
    while (b->nlines < BATCH_LINES && b->bytes < BATCH_BYTES) {
        size_t start = *pos, ll;
        const char *l = mg_jsonl_next_line(in, len, pos, &ll);
        if (!l) break;
        if (b->nlines == b->lines_cap) {
            size_t c = b->lines_cap ? b->lines_cap * 2 : 64, rows = c * nk + 1;
            if (!resize((void **)&b->line, c, sizeof *b->line) ||
                !resize((void **)&b->line_len, c, sizeof *b->line_len) ||
                !resize((void **)&b->err, c, sizeof *b->err) ||
                !resize((void **)&b->err_col, c, sizeof *b->err_col) ||
                !resize((void **)&b->err_key, c, sizeof *b->err_key) ||
                !resize((void **)&b->tok_off, rows, sizeof *b->tok_off) ||
                !resize((void **)&b->seq_off, rows, sizeof *b->seq_off))
                return MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
            b->lines_cap = c;
        }
        b->line[b->nlines] = l, b->line_len[b->nlines] = ll;
        b->nlines++, b->bytes += *pos - start;
        (*line_no)++;
    }
    *got = b->nlines > 0;
    return MG_OK;
}

typedef struct {
    mg_indexed_writer *w[MG_JSONL_MAX_KEYS];
    mg_preprocess_stats *stats;
    const char *input;
    double start, last_print;
    FILE *progress;
} sink;

static void describe(char *out, size_t cap, const mg_preprocess_config *c, mg_jsonl_error e,
                     size_t col, int key) {
    if (e == MG_JSONL_KEY_MISSING)
        snprintf(out, cap, "key '%s' missing", c->json_keys[key]);
    else if (e == MG_JSONL_NOT_STRING || e == MG_JSONL_SURROGATE)
        snprintf(out, cap, "value of '%s' at column %zu: %s", c->json_keys[key], col + 1,
                 mg_jsonl_error_text(e));
    else if (e == MG_JSONL_EMPTY || e == MG_JSONL_NOT_OBJECT)
        snprintf(out, cap, "%s", mg_jsonl_error_text(e));
    else
        snprintf(out, cap, "%s at column %zu", mg_jsonl_error_text(e), col + 1);
}

static mg_status write_batch(pipeline *pl, sink *s, batch *b) {
    const mg_preprocess_config *c = pl->c;
    mg_preprocess_stats *st = s->stats;
    size_t nk = (size_t)c->num_keys;
    for (size_t i = 0; i < b->nlines; i++) {
        st->lines++;
        if (b->err[i] != MG_JSONL_OK) {
            char why[200];
            describe(why, sizeof why, c, (mg_jsonl_error)b->err[i], b->err_col[i], b->err_key[i]);
            if (c->strict)
                return MG_FAIL(MG_ERR_FORMAT,
                               "%s:%lld: %s (--strict stops at the first invalid "
                               "line)",
                               s->input, (long long)(b->first_line + (int64_t)i), why);
            if (st->invalid_lines++ == 0) {
                st->first_invalid_line = b->first_line + (int64_t)i;
                snprintf(st->first_invalid, sizeof st->first_invalid, "%s", why);
            }
            continue;
        }
        for (size_t k = 0; k < nk; k++) {
            size_t r = i * nk + k;
            size_t t0 = b->tok_off[r], t1 = b->tok_off[r + 1];
            size_t s0 = b->seq_off[r], s1 = b->seq_off[r + 1];
            MG_CHECK(mg_indexed_writer_add_document(s->w[k], b->tokens + t0, b->seqlens + s0,
                                                    (int64_t)(s1 - s0)));
            st->tokens += (int64_t)(t1 - t0);
        }
        st->documents++;
        double t = mg_clock_seconds();
        if ((c->log_interval > 0 && st->documents % c->log_interval == 0) ||
            t - s->last_print >= 1.0) {
            if (s->progress) {
                double el = t - s->start > 1e-9 ? t - s->start : 1e-9;
                fprintf(s->progress, "Processed %lld documents (%.1f docs/s, %.2f MB/s).\n",
                        (long long)st->documents, (double)st->documents / el,
                        (double)st->bytes / el / 1048576.0);
                fflush(s->progress);
            }
            s->last_print = t;
        }
    }
    return MG_OK;
}

/* The main loop: keep up to nslots batches in flight, write them back in order. */
static mg_status run_pipeline(pipeline *pl, sink *s, const char *in, size_t len) {
    size_t pos = 0;
    int64_t line_no = 0, next_write = 0;
    int more = 1;
    mg_status st = MG_OK;
    pthread_mutex_lock(&pl->mu);
    for (;;) {
        while (more && pl->next_fill - next_write < pl->nslots) {
            batch *b = &pl->slots[pl->next_fill % pl->nslots];
            pthread_mutex_unlock(&pl->mu); /* the slot is free: only this thread touches it */
            st = fill_batch(pl, b, in, len, &pos, &line_no, &more);
            pthread_mutex_lock(&pl->mu);
            if (st != MG_OK) goto out;
            if (!more) break;
            b->state = SLOT_PENDING, b->seq = pl->next_fill++;
            pthread_cond_signal(&pl->work);
        }
        if (next_write == pl->next_fill) break;
        batch *b = &pl->slots[next_write % pl->nslots];
        while (b->state != SLOT_DONE) pthread_cond_wait(&pl->done, &pl->mu);
        pthread_mutex_unlock(&pl->mu);
        s->stats->bytes += (int64_t)b->bytes;
        if (b->status != MG_OK)
            st = MG_FAIL(b->status, "%s", b->message);
        else
            st = write_batch(pl, s, b);
        pthread_mutex_lock(&pl->mu);
        b->state = SLOT_FREE;
        next_write++;
        if (st != MG_OK) goto out;
    }
out:
    pl->stop = 1;
    pthread_cond_broadcast(&pl->work);
    pthread_mutex_unlock(&pl->mu);
    return st;
}

static mg_status map_input(const char *path, const char **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return MG_FAIL(MG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return MG_FAIL(MG_ERR_IO, "%s: not a regular file (give --input a JSONL file)", path);
    }
    *len = (size_t)sb.st_size, *data = NULL;
    if (*len > 0) {
        void *m = mmap(NULL, *len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            close(fd);
            return MG_FAIL(MG_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        }
        madvise(m, *len, MADV_SEQUENTIAL);
        *data = m;
    }
    close(fd);
    return MG_OK;
}

static mg_status run_with(const mg_preprocess_config *c, pipeline *pl, sink *s, const char *in,
                          size_t len) {
    int nw = c->workers;
    pthread_t *th = calloc((size_t)nw, sizeof *th);
    if (!th) return MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
    int started = 0;
    mg_status st = MG_OK;
    for (; started < nw; started++)
        if (pthread_create(&th[started], NULL, worker_main, pl) != 0) {
            st = MG_FAIL(MG_ERR_IO, "preprocess: cannot start worker thread %d", started);
            pthread_mutex_lock(&pl->mu);
            pl->stop = 1;
            pthread_cond_broadcast(&pl->work);
            pthread_mutex_unlock(&pl->mu);
            break;
        }
    if (st == MG_OK) st = run_pipeline(pl, s, in, len);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    free(th);
    return st;
}

mg_status mg_preprocess_run(const mg_preprocess_config *c, mg_preprocess_stats *stats,
                            FILE *progress) {
    memset(stats, 0, sizeof *stats);
    if (c->num_keys < 1 || c->num_keys > MG_JSONL_MAX_KEYS || c->workers < 1)
        return MG_FAIL(MG_ERR_USAGE, "preprocess: need 1-%d json keys and at least one worker",
                       MG_JSONL_MAX_KEYS);
    double t0 = mg_clock_seconds();
    const char *in = NULL;
    size_t len = 0;
    MG_CHECK(map_input(c->input, &in, &len));
    mg_tokenizer *tok = NULL;
    mg_status st;
    pipeline pl;
    memset(&pl, 0, sizeof pl);
    sink s;
    memset(&s, 0, sizeof s);
    s.stats = stats, s.input = c->input, s.progress = progress;
    MG_CHECK_GOTO(mg_tokenizer_load(&tok, &c->tokenizer), st, done);
    if (c->append_eod && mg_tokenizer_eod(tok) < 0) {
        st = MG_FAIL(MG_ERR_USAGE,
                     "--append-eod: %s has no end-of-document token (no eos_token / eos_id); "
                     "drop --append-eod or use a tokenizer that has one",
                     mg_tokenizer_name(tok));
        goto done;
    }
    int dtype = mg_indexed_optimal_dtype(mg_tokenizer_vocab_size(tok));
    for (int k = 0; k < c->num_keys; k++) {
        char prefix[1100];
        int n =
            snprintf(prefix, sizeof prefix, "%s_%s_document", c->output_prefix, c->json_keys[k]);
        if (n < 0 || (size_t)n >= sizeof prefix) {
            st = MG_FAIL(MG_ERR_USAGE, "--output-prefix too long: %.64s...", c->output_prefix);
            goto done;
        }
        if (k == 0) snprintf(stats->first_output, sizeof stats->first_output, "%s", prefix);
        MG_CHECK_GOTO(mg_indexed_writer_open(&s.w[k], prefix, dtype), st, done);
    }
    pl.c = c, pl.tok = tok, pl.eod = mg_tokenizer_eod(tok);
    pl.nslots = 2 * c->workers + 2;
    pl.slots = calloc((size_t)pl.nslots, sizeof *pl.slots);
    if (!pl.slots) {
        st = MG_FAIL(MG_ERR_NOMEM, "preprocess: out of memory");
        goto done;
    }
    pthread_mutex_init(&pl.mu, NULL);
    pthread_cond_init(&pl.work, NULL);
    pthread_cond_init(&pl.done, NULL);
    s.start = s.last_print = mg_clock_seconds();
    st = run_with(c, &pl, &s, in, len);
    pthread_cond_destroy(&pl.done);
    pthread_cond_destroy(&pl.work);
    pthread_mutex_destroy(&pl.mu);
    for (int k = 0; st == MG_OK && k < c->num_keys; k++)
        MG_CHECK_GOTO(mg_indexed_writer_finish(s.w[k]), st, done);
done:
    for (int i = 0; pl.slots && i < pl.nslots; i++) batch_free(&pl.slots[i]);
    free(pl.slots);
    for (int k = 0; k < c->num_keys; k++) mg_indexed_writer_free(s.w[k]);
    mg_tokenizer_free(tok);
    if (in) munmap((void *)in, len);
    stats->seconds = mg_clock_seconds() - t0;
    return st;
}
