/* TensorBoard event files, written as torch.utils.tensorboard's SummaryWriter writes them (what
 * Megatron uses): a TFRecord stream of Event protobufs in
 * <dir>/events.out.tfevents.<%010d unix time>.<hostname>.<pid>.<writer index>.
 *
 * A record is: uint64 length (little-endian), the masked CRC-32C of those 8 bytes, the data, the
 * masked CRC-32C of the data (uint32 little-endian each). The mask is TensorFlow's:
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8. CRC-32C (Castagnoli, iSCSI) comes from Intel's ISA-L
 * (libisal-dev, crc32_iscsi); builds without it refuse --tensorboard-dir.
 *
 * The Event protobuf (tensorboard/compat/proto/event.proto) is encoded here by hand; the few
 * fields used do not justify a protobuf dependency:
 *   Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *             Summary summary = 5; SourceMetadata source_metadata = 10 }
 *   Summary { repeated Value value = 1 }
 *   Value   { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
 *             SummaryMetadata metadata = 9 }
 * Fields holding proto3 defaults (step 0, wall_time +0.0) are left out, as protobuf's own
 * serializer leaves them out, so the bytes equal Python's SerializeToString().
 *
 * Exports: mg_tb_available, mg_crc32c, mg_tb_masked_crc32c, mg_tb_record_header, mg_tb_event_*,
 * mg_tb_writer, mg_tb_open, mg_tb_add_scalar, mg_tb_add_text, mg_tb_flush, mg_tb_close.
 * Needs: core/status; ISA-L when MG_HAVE_ISAL. */
#ifndef MG_TRAIN_TENSORBOARD_H
#define MG_TRAIN_TENSORBOARD_H

#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* True when this build has CRC-32C (ISA-L), i.e. can write event files. */
bool mg_tb_available(void);

/* CRC-32C of n bytes (initial value and final xor 0xffffffff, as RFC 3720); 0 without ISA-L. */
uint32_t mg_crc32c(const void *data, size_t n);
/* TFRecord's masked CRC-32C of n bytes. */
uint32_t mg_tb_masked_crc32c(const void *data, size_t n);
/* The 12 bytes before a record of len data bytes: len, then the masked CRC of len's 8 bytes. The
 * record ends with the 4 bytes of mg_tb_masked_crc32c(data, len), little-endian. */
void mg_tb_record_header(uint8_t out[12], uint64_t len);

/* Event encoders. Each writes the serialized Event into buf and returns its length, or 0 when it
 * does not fit in cap bytes. */
/* The first record of a file: {wall_time, file_version "brain.Event:2", source_metadata {writer}}
 */
size_t mg_tb_event_file_version(uint8_t *buf, size_t cap, double wall_time, const char *writer);
/* add_scalar: {wall_time, step, summary {value {tag, simple_value}}} */
size_t mg_tb_event_scalar(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                          float value);
/* add_text: the text plugin's summary, as torch writes it: value {tag "<tag>/text_summary",
 * metadata {plugin_data {plugin_name "text"}}, tensor {dtype DT_STRING, tensor_shape {dim
 * {size 1}}, string_val text}} */
size_t mg_tb_event_text(uint8_t *buf, size_t cap, double wall_time, int64_t step, const char *tag,
                        const char *text);

#define MG_TB_EVENT_MAX 8192 /* bytes of the largest event written (a --data-path as text) */

/* One event file. Events are appended through stdio and flushed (fflush) when queue_size are
 * pending (torch's max_queue, Megatron's --tensorboard-queue-size), at mg_tb_flush and at close. */
typedef struct {
    FILE *f; /* NULL: disabled, every call is a no-op */
    char path[1536];
    int queue_size, pending;
    uint8_t buf[MG_TB_EVENT_MAX]; /* the event being written: no allocation per event */
} mg_tb_writer;

/* dir "" disables the writer and returns MG_OK. Otherwise creates dir (and its parents) and a new
 * event file in it, whose first record is the file_version event. */
mg_status mg_tb_open(mg_tb_writer *w, const char *dir, int queue_size);
mg_status mg_tb_add_scalar(mg_tb_writer *w, const char *tag, double value, int64_t step);
mg_status mg_tb_add_text(mg_tb_writer *w, const char *tag, const char *text, int64_t step);
mg_status mg_tb_flush(mg_tb_writer *w);
/* Flushes and closes; the writer is disabled afterwards. */
mg_status mg_tb_close(mg_tb_writer *w);

#endif
