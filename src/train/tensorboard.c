#include "train/tensorboard.h"

#include "core/file.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef MG_HAVE_ISAL
#include <isa-l/crc.h>
#endif

/* ---- CRC-32C and the record framing ---- */

bool mg_tb_available(void) {
#ifdef MG_HAVE_ISAL
    return true;
#else
    return false;
#endif
}

uint32_t mg_crc32c(const void *data, size_t n) {
#ifdef MG_HAVE_ISAL
    /* crc32_iscsi neither inverts its input nor its result; RFC 3720's CRC does both. It takes
     * an int length: long inputs go in pieces, chaining the running value. */
    uint32_t crc = 0xffffffffu;
    const unsigned char *p = data;
    while (n > 0) {
        int chunk = n > (1u << 30) ? 1 << 30 : (int)n;
        crc = crc32_iscsi((unsigned char *)p, chunk, crc);
        p += chunk;
        n -= (size_t)chunk;
    }
    return crc ^ 0xffffffffu;
#else
    (void)data;
    (void)n;
    return 0;
#endif
}

uint32_t mg_tb_masked_crc32c(const void *data, size_t n) {
    uint32_t crc = mg_crc32c(data, n);
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static void put_le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

void mg_tb_record_header(uint8_t out[12], uint64_t len) {
    put_le(out, len, 8);
    put_le(out + 8, mg_tb_masked_crc32c(out, 8), 4);
}

/* ---- a protobuf writer: varints, fixed64/fixed32, length-delimited fields ---- */

typedef struct {
    uint8_t *p;
    size_t cap, len;
    bool full; /* something did not fit: the result is 0 */
} pb_buf;

enum { PB_VARINT = 0, PB_FIXED64 = 1, PB_LEN = 2, PB_FIXED32 = 5 };

static void pb_raw(pb_buf *b, const void *src, size_t n) {
    if (b->full || n > b->cap - b->len) {
        b->full = true;
        return;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static size_t varint_encode(uint8_t out[10], uint64_t v) {
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

static void pb_varint(pb_buf *b, uint64_t v) {
    uint8_t tmp[10];
    pb_raw(b, tmp, varint_encode(tmp, v));
}

static void pb_key(pb_buf *b, int field, int wire) {
    pb_varint(b, (uint64_t)field << 3 | wire);
}

static void pb_double(pb_buf *b, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint8_t tmp[8];
    put_le(tmp, bits, 8);
    pb_key(b, field, PB_FIXED64);
    pb_raw(b, tmp, 8);
}

static void pb_float(pb_buf *b, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    uint8_t tmp[4];
    put_le(tmp, bits, 4);
    pb_key(b, field, PB_FIXED32);
    pb_raw(b, tmp, 4);
}

/* int64 fields are varints of the two's complement (10 bytes when negative) */
static void pb_int64(pb_buf *b, int field, int64_t v) {
    pb_key(b, field, PB_VARINT);
    pb_varint(b, (uint64_t)v);
}

static void pb_bytes(pb_buf *b, int field, const void *data, size_t n) {
    pb_key(b, field, PB_LEN);
    pb_varint(b, n);
    pb_raw(b, data, n);
}

static void pb_string(pb_buf *b, int field, const char *s) {
    pb_bytes(b, field, s, strlen(s));
}

/* A nested message: pb_begin writes the key and returns where its content starts; pb_end moves
 * the content right by the size of its length's varint and writes the length in front. */
static size_t pb_begin(pb_buf *b, int field) {
    pb_key(b, field, PB_LEN);
    return b->len;
}

static void pb_end(pb_buf *b, size_t start) {
    if (b->full) return;
    size_t n = b->len - start;
    uint8_t tmp[10];
    size_t k = varint_encode(tmp, n);
    if (k > b->cap - b->len) {
        b->full = true;
        return;
    }
    memmove(b->p + start + k, b->p + start, n);
    memcpy(b->p + start, tmp, k);
    b->len += k;
}

static size_t pb_result(const pb_buf *b) {
    return b->full ? 0 : b->len;
}

/* Event's leading fields, each left out at its proto3 default as protobuf does. */
static void event_head(pb_buf *b, double wall_time, int64_t step) {
    uint64_t bits;
    memcpy(&bits, &wall_time, sizeof bits);
    if (bits != 0) pb_double(b, 1, wall_time);
    if (step != 0) pb_int64(b, 2, step);
}

size_t mg_tb_event_file_version(uint8_t *buf, size_t cap, double wall_time, const char *writer) {
    pb_buf b = {buf, cap, 0, false};
    event_head(&b, wall_time, 0);
    pb_string(&b, 3, "brain.Event:2");
    size_t meta = pb_begin(&b, 10); /* SourceMetadata */
    pb_string(&b, 1, writer);
    pb_end(&b, meta);
    return pb_result(&b);
}

size_t mg_tb_event_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                          float value) {
    pb_buf b = {buf, cap, 0, false};
    event_head(&b, wall_time, step);
    size_t summary = pb_begin(&b, 5);
    size_t value_at = pb_begin(&b, 1); /* Summary.value */
    pb_string(&b, 1, tag);
    pb_float(&b, 2, value); /* simple_value: a oneof member, written even when 0 */
    pb_end(&b, value_at);
    pb_end(&b, summary);
    return pb_result(&b);
}

size_t mg_tb_event_text(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                        const char *text) {
    pb_buf b = {buf, cap, 0, false};
    event_head(&b, wall_time, step);
    size_t summary = pb_begin(&b, 5);
    size_t value_at = pb_begin(&b, 1);
    size_t tag_len = strlen(tag), suffix_len = strlen("/text_summary");
    pb_key(&b, 1, PB_LEN);
    pb_varint(&b, tag_len + suffix_len);
    pb_raw(&b, tag, tag_len);
    pb_raw(&b, "/text_summary", suffix_len);
    size_t tensor = pb_begin(&b, 8); /* TensorProto */
    pb_key(&b, 1, PB_VARINT);        /* dtype */
    pb_varint(&b, 7);                /* DT_STRING */
    size_t shape = pb_begin(&b, 2);  /* TensorShapeProto */
    size_t dim = pb_begin(&b, 2);    /* Dim */
    pb_int64(&b, 1, 1);              /* size 1 */
    pb_end(&b, dim);
    pb_end(&b, shape);
    pb_string(&b, 8, text); /* string_val */
    pb_end(&b, tensor);
    size_t meta = pb_begin(&b, 9);   /* SummaryMetadata */
    size_t plugin = pb_begin(&b, 1); /* PluginData; content: TextPluginData(version=0), empty */
    pb_string(&b, 1, "text");
    pb_end(&b, plugin);
    pb_end(&b, meta);
    pb_end(&b, value_at);
    pb_end(&b, summary);
    return pb_result(&b);
}

/* ---- the event file ---- */

static double wall_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* mkdir -p, as Megatron's SummaryWriter (os.makedirs) does */
static mg_status make_dirs(const char *dir) {
    return mg_file_make_dirs(dir, "the --tensorboard-dir directory",
                             "pass a directory this rank can write to");
}

static mg_status write_event(mg_tb_writer *w, size_t n) {
    if (n == 0)
        return MG_FAIL(MG_ERR_INTERNAL, "a TensorBoard event does not fit in %d bytes",
                       MG_TB_EVENT_MAX);
    uint8_t head[12], tail[4];
    mg_tb_record_header(head, n);
    put_le(tail, mg_tb_masked_crc32c(w->buf, n), 4);
    if (fwrite(head, 1, sizeof head, w->f) != sizeof head || fwrite(w->buf, 1, n, w->f) != n ||
        fwrite(tail, 1, sizeof tail, w->f) != sizeof tail)
        return MG_FAIL(MG_ERR_IO, "cannot write the TensorBoard event file %s: %s", w->path,
                       strerror(errno));
    if (++w->pending >= w->queue_size) MG_CHECK(mg_tb_flush(w));
    return MG_OK;
}

mg_status mg_tb_open(mg_tb_writer *w, const char *dir, int queue_size) {
    w->f = NULL;
    w->path[0] = '\0';
    w->pending = 0;
    w->queue_size = queue_size > 0 ? queue_size : 1;
    if (!dir || !dir[0]) return MG_OK;
    if (!mg_tb_available())
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "this build has no CRC-32C for TensorBoard event files (ISA-L was not "
                       "found when it was built): apt-get install libisal-dev and rebuild, or "
                       "drop --tensorboard-dir");
    MG_CHECK(make_dirs(dir));
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    double now = wall_time_now();
    /* tensorboard's EventFileWriter: "events.out.tfevents.%010d.%s.%s.%s" % (time.time(),
     * hostname, pid, the process's writer count, 0 for the first) */
    if (snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%010lld.%s.%ld.0", dir,
                 (long long)now, host, (long)getpid()) >= (int)sizeof w->path)
        return MG_FAIL(MG_ERR_USAGE, "--tensorboard-dir is too long for an event file path: %s",
                       dir);
    w->f = fopen(w->path, "wb");
    if (!w->f)
        return MG_FAIL(MG_ERR_IO,
                       "cannot create the TensorBoard event file %s: %s; pass a --tensorboard-dir "
                       "this rank can write to",
                       w->path, strerror(errno));
    mg_status st;
    MG_CHECK_GOTO(
        write_event(w, mg_tb_event_file_version(w->buf, sizeof w->buf, now, "megatron.c")), st,
        fail);
    MG_CHECK_GOTO(mg_tb_flush(w), st, fail);
    return MG_OK;
fail:
    fclose(w->f);
    w->f = NULL;
    return st;
}

mg_status mg_tb_add_scalar(mg_tb_writer *w, const char *tag, double value, int64_t step) {
    if (!w->f) return MG_OK;
    /* simple_value is a float, as torch's add_scalar writes it */
    return write_event(
        w, mg_tb_event_scalar(w->buf, sizeof w->buf, wall_time_now(), step, tag, (float)value));
}

mg_status mg_tb_add_text(mg_tb_writer *w, const char *tag, const char *text, int64_t step) {
    if (!w->f) return MG_OK;
    return write_event(w,
                       mg_tb_event_text(w->buf, sizeof w->buf, wall_time_now(), step, tag, text));
}

mg_status mg_tb_flush(mg_tb_writer *w) {
    if (!w->f) return MG_OK;
    w->pending = 0;
    if (fflush(w->f) != 0)
        return MG_FAIL(MG_ERR_IO, "cannot write the TensorBoard event file %s: %s", w->path,
                       strerror(errno));
    return MG_OK;
}

mg_status mg_tb_close(mg_tb_writer *w) {
    if (!w->f) return MG_OK;
    mg_status st = mg_tb_flush(w);
    if (fclose(w->f) != 0 && st == MG_OK)
        st = MG_FAIL(MG_ERR_IO, "cannot close the TensorBoard event file %s: %s", w->path,
                     strerror(errno));
    w->f = NULL;
    return st;
}
