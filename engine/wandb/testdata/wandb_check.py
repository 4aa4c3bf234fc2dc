"""An independent reader and writer of W&B .wandb files for rlhfstation's tests.

The framing (a 7-byte ":W&B" header, then LevelDB-log chunks in 32 KiB blocks, each chunk's
CRC-32 taken over its type byte and data) is written here from the format's description; the
records are the classes protoc generates from wandb_records.proto (W&B's field numbers).

  wandb_check.py read FILE      prints the records as one JSON document
  wandb_check.py write FILE     writes a sample run (one record spans three blocks)
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

BLOCK = 32768


def load_classes():
    here = os.path.dirname(os.path.abspath(__file__))
    out = tempfile.mkdtemp()
    subprocess.run(["protoc", "-I", here, "--python_out", out, os.path.join(here, "wandb_records.proto")], check=True)
    sys.path.insert(0, out)
    import wandb_records_pb2
    return wandb_records_pb2


def chunks(data):
    """Yields (type, payload) for every chunk, checking each CRC and the block padding."""
    if data[:4] != b":W&B":
        raise SystemExit("no :W&B ident")
    magic, version = struct.unpack("<HB", data[4:7])
    if magic != 0xBEE1 or version != 0:
        raise SystemExit("bad magic %x or version %d" % (magic, version))
    pos = 7
    while pos < len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:
            if data[pos:pos + left] != b"\0" * left:
                raise SystemExit("non-zero block tail at %d" % pos)
            pos += left
            continue
        crc, length, typ = struct.unpack("<IHB", data[pos:pos + 7])
        if 7 + length > left:
            raise SystemExit("chunk at %d crosses its block" % pos)
        payload = data[pos + 7:pos + 7 + length]
        if len(payload) != length:
            raise SystemExit("truncated chunk at %d" % pos)
        if zlib.crc32(payload, zlib.crc32(bytes([typ]))) & 0xFFFFFFFF != crc:
            raise SystemExit("checksum mismatch at %d" % pos)
        yield typ, payload
        pos += 7 + length


def records(data):
    buf = None
    for typ, payload in chunks(data):
        if typ == 1:
            if buf is not None:
                raise SystemExit("full chunk inside a record")
            yield payload
        elif typ == 2:
            buf = payload
        elif typ in (3, 4):
            if buf is None:
                raise SystemExit("continuation without a first chunk")
            buf += payload
            if typ == 4:
                yield buf
                buf = None
        else:
            raise SystemExit("chunk type %d" % typ)
    if buf is not None:
        raise SystemExit("file ends inside a record")


def items(seq):
    return [[it.key, it.value_json] for it in seq]


def read(path, pb):
    out = []
    with open(path, "rb") as f:
        data = f.read()
    for raw in records(data):
        r = pb.Record()
        r.ParseFromString(raw)
        kind = r.WhichOneof("record_type")
        d = {"num": r.num, "kind": kind}
        if kind == "run":
            d.update(run_id=r.run.run_id, project=r.run.project, display_name=r.run.display_name,
                     start=r.run.start_time.seconds, config=items(r.run.config.update))
        elif kind == "history":
            d.update(step=r.history.step.num, items=items(r.history.item))
        elif kind in ("config", "summary"):
            d.update(items=items(getattr(r, kind).update))
        elif kind == "exit":
            d.update(exit_code=r.exit.exit_code, runtime=r.exit.runtime)
        out.append(d)
    json.dump({"records": out}, sys.stdout)


def write(path, pb):
    recs = []
    r = pb.Record(num=1)
    r.run.run_id, r.run.project, r.run.display_name = "py3abc12", "checks", "python-written"
    r.run.start_time.seconds = 1700000000
    recs.append(r)
    r = pb.Record(num=2)
    r.config.update.add(key="learning_rate", value_json="1e-05")
    recs.append(r)
    for step in range(1, 6):
        r = pb.Record(num=2 + step)
        r.history.step.num = step
        vals = {"train/reward": 0.1 * step, "train/kl": float("nan") if step == 3 else 0.01 * step,
                "train/global_step": step}
        for k, v in vals.items():
            r.history.item.add(key=k, value_json=json.dumps(v))
        if step == 4:  # a long text value: this record spans three blocks
            r.history.item.add(key="note", value_json=json.dumps("x" * 70000))
        recs.append(r)
    r = pb.Record(num=9)
    r.exit.exit_code = 0
    recs.append(r)

    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for rec in recs:
        data = rec.SerializeToString()
        first = True
        while True:
            left = BLOCK - len(out) % BLOCK
            if left < 7:
                out += b"\0" * left
                continue
            n = min(left - 7, len(data))
            last = n == len(data)
            typ = (1 if last else 2) if first else (4 if last else 3)
            part = data[:n]
            out += struct.pack("<IHB", zlib.crc32(part, zlib.crc32(bytes([typ]))) & 0xFFFFFFFF, n, typ) + part
            data, first = data[n:], False
            if last:
                break
    with open(path, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    pb = load_classes()
    {"read": read, "write": write}[sys.argv[1]](sys.argv[2], pb)
