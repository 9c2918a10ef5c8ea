#!/usr/bin/env python3
"""MXNet's indexed RecordIO writer, transcribed to pure Python (no MXNet): dmlc-core's
RecordIOWriter::WriteRecord (a record is cut at every 4-byte-aligned magic word, which is
dropped; the parts are flagged 1, 2, ..., 3), mxnet.recordio.pack (an IRHeader 'IfQQ', a label
vector making flag its length) and MXIndexedRecordIO's index (`key\\toffset` lines).

  .venv/bin/python scripts/reference/mxnet_recordio.py pack-folder DIR PREFIX [DIR PREFIX...]

writes PREFIX.rec and PREFIX.idx (for each DIR PREFIX pair, in one process: importing torchvision
costs seconds) from an image tree as torchvision's ImageFolder lists it: record
0 is insightface's header (label vector [1 + images, 1 + images]), then key i (1-based) holds the
i-th image's file bytes with its class as the label.
"""
import struct, sys

MAGIC = 0xCED7230A


def write_record(f, data):
    """dmlc::RecordIOWriter::WriteRecord."""
    def lrec(cflag, n):
        return (cflag << 29) | n

    def part(cflag, chunk):
        f.write(struct.pack("<II", MAGIC, lrec(cflag, len(chunk))))
        f.write(chunk)
        f.write(b"\0" * (-len(chunk) % 4))

    dptr = 0
    for i in range(0, len(data) >> 2 << 2, 4):
        if struct.unpack("<I", data[i:i + 4])[0] == MAGIC:
            part(1 if dptr == 0 else 2, data[dptr:i])
            dptr = i + 4
    part(3 if dptr != 0 else 0, data[dptr:])


def pack(label, payload, id_=0, id2=0):
    """mxnet.recordio.pack: a number label (flag 0) or a label vector (flag = its length)."""
    if isinstance(label, (list, tuple)):
        return struct.pack("<IfQQ", len(label), 0.0, id_, id2) + struct.pack(f"<{len(label)}f", *label) + payload
    return struct.pack("<IfQQ", 0, float(label), id_, id2) + payload


def write(prefix, records):
    """records: (key, packed bytes) in order."""
    with open(prefix + ".rec", "wb") as f, open(prefix + ".idx", "w") as idx:
        for key, data in records:
            idx.write(f"{key}\t{f.tell()}\n")
            write_record(f, data)


def pack_folder(folder, prefix):
    from torchvision.datasets import ImageFolder
    samples = ImageFolder(folder, loader=lambda p: None).samples
    records = [(0, pack([len(samples) + 1.0, len(samples) + 1.0], b""))]
    for key, (path, cls) in enumerate(samples, start=1):
        with open(path, "rb") as f:
            records.append((key, pack(cls, f.read(), id_=key)))
    write(prefix, records)
    print(f"{prefix}.rec: {len(samples)} images")


if __name__ == "__main__":
    pairs = sys.argv[2:]
    if len(sys.argv) < 4 or sys.argv[1] != "pack-folder" or len(pairs) % 2:
        sys.exit(__doc__)
    for folder, prefix in zip(pairs[::2], pairs[1::2]):
        pack_folder(folder, prefix)
