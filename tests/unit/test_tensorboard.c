/* The TensorBoard event writer (src/train/tensorboard.c): CRC-32C against RFC 3720's test vectors
 * (appendix B.4) and the check value of "123456789"; the masked CRC, the record framing and every
 * event kind byte for byte against Python's protobuf and tensorboard (the hex strings below are
 * event_pb2.Event(...).SerializeToString() and tensorboard.summary.writer.record_writer
 * .RecordWriter output, tensorboard 2.21); the event file's name and records. The end-to-end test
 * (tests/cli/test_tensorboard.sh) reads a training run's file with tensorboard's own reader. */
#include "test.h"

#include "core/status.h"
#include "train/tensorboard.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MG_HAVE_ISAL

static size_t from_hex(const char *hex, uint8_t *out, size_t cap) {
    size_t n = strlen(hex) / 2;
    if (n > cap) return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        out[i] = (uint8_t)v;
    }
    return n;
}

/* enc: what our encoder wrote (length n); hex: Python's bytes */
static void expect_bytes(mg_test_ctx *t, const char *what, const uint8_t *enc, size_t n,
                         const char *hex) {
    uint8_t want[1024];
    size_t m = from_hex(hex, want, sizeof want);
    MG_EXPECT(n == m, "%s: %zu bytes, Python's %zu", what, n, m);
    if (n != m) return;
    for (size_t i = 0; i < n; i++)
        if (enc[i] != want[i]) {
            MG_EXPECT(0, "%s: byte %zu is %02x, Python's %02x", what, i, enc[i], want[i]);
            return;
        }
}

MG_TEST(tensorboard_crc32c_rfc3720_vectors) {
    uint8_t buf[48];
    memset(buf, 0, 32);
    MG_EXPECT(mg_crc32c(buf, 32) == 0x8A9136AAu, "32 zeros: %08x", mg_crc32c(buf, 32));
    memset(buf, 0xff, 32);
    MG_EXPECT(mg_crc32c(buf, 32) == 0x62A8AB43u, "32 x 0xff: %08x", mg_crc32c(buf, 32));
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)i;
    MG_EXPECT(mg_crc32c(buf, 32) == 0x46DD794Eu, "0..31: %08x", mg_crc32c(buf, 32));
    for (int i = 0; i < 32; i++) buf[i] = (uint8_t)(31 - i);
    MG_EXPECT(mg_crc32c(buf, 32) == 0x113FDB5Cu, "31..0: %08x", mg_crc32c(buf, 32));
    /* B.4's iSCSI read (10) command PDU */
    size_t n = from_hex("01c000000000000000000000000000001400000000000400000000140000001828"
                        "000000000000000200000000000000",
                        buf, sizeof buf);
    MG_EXPECT(n == 48 && mg_crc32c(buf, n) == 0xD9963A56u, "read PDU: %08x", mg_crc32c(buf, n));
    MG_EXPECT(mg_crc32c("123456789", 9) == 0xE3069283u, "check value: %08x",
              mg_crc32c("123456789", 9));
    MG_EXPECT(mg_crc32c("", 0) == 0, "empty input: %08x", mg_crc32c("", 0));
}

MG_TEST(tensorboard_masked_crc_and_record_frame) {
    uint8_t zeros[32] = {0};
    /* tensorboard's masked_crc32c(bytes(32)) and masked_crc32c(b"123456789") */
    MG_EXPECT(mg_tb_masked_crc32c(zeros, 32) == 0x0fd7fffau, "masked zeros: %08x",
              mg_tb_masked_crc32c(zeros, 32));
    MG_EXPECT(mg_tb_masked_crc32c("123456789", 9) == 0xc78ab0e5u, "masked check value: %08x",
              mg_tb_masked_crc32c("123456789", 9));

    /* a whole record as RecordWriter frames the event of the next test */
    uint8_t ev[64], rec[96];
    size_t n = mg_tb_event_scalar(ev, sizeof ev, 1700000000.25, 7, "lm loss", 2.5f);
    MG_EXPECT(n == 29, "event of %zu bytes", n);
    if (n != 29) return;
    mg_tb_record_header(rec, n);
    memcpy(rec + 12, ev, n);
    uint32_t c = mg_tb_masked_crc32c(ev, n);
    for (int i = 0; i < 4; i++) rec[12 + n + (size_t)i] = (uint8_t)(c >> (8 * i));
    expect_bytes(t, "record", rec, 12 + n + 4,
                 "1d00000000000000602fdf230900001040fc54d94110072a100a0e0a076c6d206c6f7373150000"
                 "2040f906a1d7");
}

MG_TEST(tensorboard_events_match_protobuf) {
    uint8_t b[1024];
    size_t n = mg_tb_event_scalar(b, sizeof b, 1700000000.25, 7, "lm loss", 2.5f);
    expect_bytes(t, "scalar", b, n, "0900001040fc54d94110072a100a0e0a076c6d206c6f73731500002040");

    /* a 130-byte tag: two-byte lengths for the value and the summary (the nested-length path),
     * a two-byte step varint, a negative value */
    char tag[131];
    memset(tag, 'x', 130);
    tag[130] = '\0';
    n = mg_tb_event_scalar(b, sizeof b, 1.5, 300, tag, -0.125f);
    char want[400] = "09000000000000f83f10ac022a8d010a8a010a8201";
    for (int i = 0; i < 130; i++) strcat(want, "78");
    strcat(want, "15000000be");
    expect_bytes(t, "long tag", b, n, want);

    /* step 0 is left out (proto3 default); a 0.0 value stays (a oneof member) */
    n = mg_tb_event_scalar(b, sizeof b, 2.0, 0, "grad-norm", 0.0f);
    expect_bytes(t, "step 0", b, n, "0900000000000000402a120a100a09677261642d6e6f726d1500000000");
    /* a negative int64 is a ten-byte varint */
    n = mg_tb_event_scalar(b, sizeof b, 2.0, -1, "t", 1.0f);
    expect_bytes(t, "step -1", b, n,
                 "09000000000000004010ffffffffffffffffff012a0a0a080a0174150000803f");

    n = mg_tb_event_file_version(b, sizeof b, 1700000000.5, "megatron.c");
    expect_bytes(t, "file_version", b, n,
                 "0900002040fc54d9411a0d627261696e2e4576656e743a32520c0a0a6d65676174726f6e2e63");

    n = mg_tb_event_text(b, sizeof b, 1700000000.5, 12, "num_layers", "2");
    expect_bytes(t, "text", b, n,
                 "0900002040fc54d941100c2a320a300a176e756d5f6c61796572732f746578745f73756d6d61"
                 "7279420b08071204120208014201324a080a060a0474657874");

    /* too small a buffer: 0, never a partial event */
    MG_EXPECT(mg_tb_event_scalar(b, 28, 1700000000.25, 7, "lm loss", 2.5f) == 0,
              "28 bytes cannot hold the 29-byte event");
    MG_EXPECT(mg_tb_event_scalar(b, 29, 1700000000.25, 7, "lm loss", 2.5f) == 29,
              "29 bytes hold it");
}

/* Reads the records of an event file, checking each frame's CRCs; returns the record count or
 * -1 on a bad frame. lens[i]: record i's data length. */
static int read_records(const char *path, size_t *lens, int cap, uint8_t *first, size_t first_cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0;
    uint8_t head[12], tail[4], data[MG_TB_EVENT_MAX];
    while (fread(head, 1, 12, f) == 12) {
        uint64_t len = 0;
        uint32_t hc = 0, dc = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)head[i] << (8 * i);
        for (int i = 0; i < 4; i++) hc |= (uint32_t)head[8 + i] << (8 * i);
        if (len > sizeof data || hc != mg_tb_masked_crc32c(head, 8) ||
            fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4) {
            n = -1;
            break;
        }
        for (int i = 0; i < 4; i++) dc |= (uint32_t)tail[i] << (8 * i);
        if (dc != mg_tb_masked_crc32c(data, len)) {
            n = -1;
            break;
        }
        if (n == 0 && len <= first_cap) memcpy(first, data, len);
        if (n < cap) lens[n] = len;
        n++;
    }
    fclose(f);
    return n;
}

MG_TEST(tensorboard_writer_file) {
    char dir[] = "/tmp/mg_tb_test_XXXXXX";
    if (!mkdtemp(dir)) {
        MG_EXPECT(0, "mkdtemp failed");
        return;
    }
    char sub[64];
    snprintf(sub, sizeof sub, "%s/a/b", dir); /* created with its parents */
    mg_tb_writer *w = calloc(1, sizeof *w);
    MG_EXPECT_OK(mg_tb_open(w, sub, 2));
    MG_EXPECT(w->f != NULL, "writer not open");
    MG_EXPECT_OK(mg_tb_add_scalar(w, "lm loss", 2.5, 7));
    MG_EXPECT_OK(mg_tb_add_text(w, "num_layers", "2", 0));
    MG_EXPECT(w->pending == 0, "queue size 2: flushed after two events, %d pending", w->pending);
    MG_EXPECT_OK(mg_tb_add_scalar(w, "grad-norm", 0.5, 8));
    MG_EXPECT(w->pending == 1, "%d pending, want 1", w->pending);
    char path[sizeof w->path];
    snprintf(path, sizeof path, "%s", w->path);
    MG_EXPECT_OK(mg_tb_close(w));
    MG_EXPECT(w->f == NULL, "closed writer still open");
    MG_EXPECT_OK(mg_tb_add_scalar(w, "after close", 1, 1)); /* a no-op */

    /* events.out.tfevents.<10 digits>.<host>.<pid>.0 */
    char host[256] = "";
    gethostname(host, sizeof host);
    char tail[300];
    snprintf(tail, sizeof tail, ".%s.%ld.0", host, (long)getpid());
    const char *name = strrchr(path, '/');
    name = name ? name + 1 : path;
    const char *prefix = "events.out.tfevents.";
    size_t pl = strlen(prefix);
    bool digits = strlen(name) > pl + 10;
    for (size_t i = pl; digits && i < pl + 10; i++) digits = name[i] >= '0' && name[i] <= '9';
    MG_EXPECT(!strncmp(name, prefix, pl) && digits && !strcmp(name + pl + 10, tail),
              "file name %s, want %s<10 digits>%s", name, prefix, tail);

    size_t lens[8];
    uint8_t first[256];
    int n = read_records(path, lens, 8, first, sizeof first);
    MG_EXPECT(n == 4, "%d records (frames checked), want 4", n);
    if (n == 4) {
        uint8_t want[256];
        size_t m = mg_tb_event_file_version(want, sizeof want, 1.0, "megatron.c");
        /* the first record is the version event: the same bytes after the 9-byte wall_time */
        MG_EXPECT(lens[0] == m && !memcmp(first + 9, want + 9, m - 9),
                  "first record is not the file_version event");
        MG_EXPECT(lens[1] == 29, "scalar record of %zu bytes, want 29", lens[1]);
    }
    unlink(path);
    char d[128];
    snprintf(d, sizeof d, "%s/a/b", dir);
    rmdir(d);
    snprintf(d, sizeof d, "%s/a", dir);
    rmdir(d);
    rmdir(dir);

    /* "" disables; a file in the way fails with one line naming it */
    MG_EXPECT_OK(mg_tb_open(w, "", 10));
    MG_EXPECT(w->f == NULL, "empty dir must disable the writer");
    MG_EXPECT_OK(mg_tb_add_scalar(w, "x", 1, 1));
    MG_EXPECT_ERROR(mg_tb_open(w, "/dev/null/tb", 10), MG_ERR_IO, "/dev/null");
    MG_EXPECT(w->f == NULL, "failed open left a file");
    free(w);
}

#else /* built without ISA-L */

MG_TEST(tensorboard_refused_without_isal) {
    mg_tb_writer *w = calloc(1, sizeof *w);
    MG_EXPECT(!mg_tb_available(), "available without ISA-L");
    MG_EXPECT_ERROR(mg_tb_open(w, "/tmp/mg_tb_never", 10), MG_ERR_UNSUPPORTED, "libisal-dev");
    free(w);
}

#endif
