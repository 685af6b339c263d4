#!/usr/bin/env python3
"""Reads a --tensorboard-dir with the `tensorboard` package's own readers, as TensorBoard does,
and prints one JSON object (tests/cli/test_tensorboard.sh checks it against the run's metrics
file and log):
  tensorboard_events.py DIR
{"files": [event file names], "file_version": the first event's, "first_step": its step,
 "frames_ok": every record's framing and both masked CRC-32Cs check out and they cover the file,
 "records": the record count,
 "scalars": {tag: [[step, value], ...]} from EventAccumulator (simple_value scalars),
 "texts": {tag: [[step, text], ...]} (the text plugin's tensors)}.
The frames are read with tensorboard's record reader (its stub of TensorFlow's, which checks
both CRCs and raises on a mismatch); EventAccumulator alone would stop quietly at a bad record.
Exit 3 when the tensorboard package is missing (the test then skips), 1 on any other failure."""
import json
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
except ImportError as e:  # the test skips
    print(f"tensorboard_events: {e}", file=sys.stderr)
    sys.exit(3)


def frames(path):
    """(records, ok): every record read with both CRCs checked, and they end at the file's end."""
    reader = PyRecordReader_New(path.encode())
    n, size = 0, 0
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            print(f"tensorboard_events: {e}", file=sys.stderr)
            return n, False
        n += 1
        size += len(reader.record()) + 16  # length, its CRC, the data, its CRC
    return n, size == os.path.getsize(path)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tensorboard_events.py DIR")
    d = sys.argv[1]
    names = sorted(f for f in os.listdir(d) if f.startswith("events.out.tfevents."))
    if not names:
        sys.exit(f"tensorboard_events: no event file in {d}")
    out = {"files": names}
    first = next(iter(LegacyEventFileLoader(os.path.join(d, names[0])).Load()))
    out["file_version"], out["first_step"] = first.file_version, first.step
    out["records"], out["frames_ok"] = 0, True
    for n in names:
        records, ok = frames(os.path.join(d, n))
        out["records"] += records
        out["frames_ok"] &= ok
    acc = event_accumulator.EventAccumulator(
        d, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    out["scalars"] = {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]}
    out["texts"] = {t: [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(t)]
                    for t in tags["tensors"]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
