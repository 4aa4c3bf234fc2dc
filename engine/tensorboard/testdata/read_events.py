"""Independent reader of TensorBoard event files, for the Go tests.

Written from the format's definition only (TFRecord framing with masked CRC-32C, the Event and
Summary protobuf messages), with no tensorboard, protobuf or zlib: the CRC-32C table and the
varint parser are built here. Scalars may be simple_value or a DT_FLOAT tensor (float_val or
tensor_content), texts a DT_STRING tensor. Prints the events as one JSON document; float values are given as
their IEEE-754 bits plus repr(), so NaN and infinities survive.

usage: read_events.py EVENTFILE
"""
import json
import struct
import sys


def crc32c_table():
    poly = 0x82F63B78  # Castagnoli, reflected
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def fields(buf):
    """Yields (field number, wire type, value) for each field of a message."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(buf, i)
        elif wire == 1:
            v = buf[i:i + 8]
            i += 8
        elif wire == 5:
            v = buf[i:i + 4]
            i += 4
        elif wire == 2:
            n, i = varint(buf, i)
            v = buf[i:i + n]
            i += n
        else:
            raise ValueError("wire type %d" % wire)
        yield num, wire, v


def tensor(buf):
    """A TensorProto of one DT_FLOAT (float_val, packed or not, or tensor_content) or of
    DT_STRING values: returns (float32 bits or None, text or None)."""
    dtype, floats, strings = None, [], []
    for num, wire, v in fields(buf):
        if num == 1 and wire == 0:
            dtype = v
        elif num == 4 and wire == 2 and dtype == 1:
            floats += [struct.unpack("<I", v[i:i + 4])[0] for i in range(0, len(v), 4)]
        elif num == 5 and wire == 2:
            floats += [struct.unpack("<I", v[i:i + 4])[0] for i in range(0, len(v), 4)]
        elif num == 5 and wire == 5:
            floats.append(struct.unpack("<I", v)[0])
        elif num == 8 and wire == 2:
            strings.append(v.decode("utf-8"))
    if dtype == 7:
        return None, "\n".join(strings)
    if dtype == 1 and len(floats) == 1:
        return floats[0], None
    return None, None


def plugin_name(buf):
    for num, wire, v in fields(buf):
        if num == 1 and wire == 2:
            for n2, w2, x in fields(v):
                if n2 == 1 and w2 == 2:
                    return x.decode("utf-8")
    return None


def event(buf):
    ev = {"wall_time": None, "step": 0, "file_version": None, "values": []}
    for num, wire, v in fields(buf):
        if num == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wire == 0:
            ev["step"] = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 3 and wire == 2:
            ev["file_version"] = v.decode("utf-8")
        elif num == 5 and wire == 2:
            for n2, w2, val in fields(v):
                if n2 != 1 or w2 != 2:
                    continue
                tag, bits, text, plugin = None, None, None, None
                for n3, w3, x in fields(val):
                    if n3 == 1 and w3 == 2:
                        tag = x.decode("utf-8")
                    elif n3 == 2 and w3 == 5:
                        bits = struct.unpack("<I", x)[0]
                    elif n3 == 8 and w3 == 2:
                        bits, text = tensor(x)
                    elif n3 == 9 and w3 == 2:
                        plugin = plugin_name(x)
                out = {"tag": tag}
                if bits is not None:
                    f = struct.unpack("<f", struct.pack("<I", bits))[0]
                    out.update(bits=bits, repr=repr(f))
                if text is not None:
                    out["text"] = text
                if plugin is not None:
                    out["plugin"] = plugin
                ev["values"].append(out)
    return ev


def main():
    data = open(sys.argv[1], "rb").read()
    events, off = [], 0
    while off < len(data):
        header = data[off:off + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[off + 8:off + 12])
        if hcrc != masked(header):
            sys.exit("length CRC mismatch at byte %d" % off)
        body = data[off + 12:off + 12 + n]
        (dcrc,) = struct.unpack("<I", data[off + 12 + n:off + 16 + n])
        if dcrc != masked(body):
            sys.exit("data CRC mismatch at byte %d" % off)
        events.append(event(body))
        off += 16 + n
    json.dump({"events": events}, sys.stdout, allow_nan=False)


main()
