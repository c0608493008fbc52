"""Known-answer vectors for services/pkg/pps, computed by libsodium itself (through PyNaCl).

Run by the Go test TestLibsodiumVectors with the project's venv (bin/venv, installed by
hack/tools.sh); prints one JSON document on stdout. Every construction of spec §8 that the C
publisher and the Go Garbler must agree on is written here from libsodium primitives only:
randombytes_buf_deterministic (PRG), keyed crypto_generichash (PRF), crypto_kx, and
crypto_aead_xchacha20poly1305_ietf (sealed function keys). Inputs are derived
deterministically so the document is the same on every run.
"""

import json
import struct
import sys

try:
    import nacl
    import nacl.bindings as sodium
except ImportError as e:  # the Go test turns exit code 3 into "run hack/tools.sh"
    sys.stderr.write("PyNaCl is not installed: %s\n" % e)
    sys.exit(3)


def prg(seed, n):
    return sodium.randombytes_buf_deterministic(n, seed)


def prf(key, label):
    return sodium.crypto_generichash_blake2b_salt_personal(label.encode(), digest_size=32, key=key)


def material(tag, n=32):
    """Deterministic test input number tag."""
    return prg(bytes([tag]) * 32, n)


def ratchet(k0, rounds):
    key, seeds = k0, []
    for _ in range(rounds):
        seeds.append(prf(key, "pps/v1/seed"))
        key = prf(key, "pps/v1/next")
    return seeds, key


def labels(seed, values):
    buf = prg(seed, 2 * 32 * values * 16)
    pairs = []
    for v in range(values):
        for j in range(32):
            idx = 2 * (v * 32 + j)
            w0 = bytearray(buf[16 * idx:16 * idx + 16])
            w1 = bytearray(buf[16 * (idx + 1):16 * (idx + 2)])
            w1[0] = (w1[0] & 0xFE) | (1 ^ (w0[0] & 1))
            pairs.append((bytes(w0), bytes(w1)))
    return pairs


def publish(seed, xs):
    pairs = labels(seed, len(xs))
    out = b""
    for v, x in enumerate(xs):
        u = x & 0xFFFFFFFF
        for j in range(32):
            out += pairs[v * 32 + j][(u >> j) & 1]
    return out


def main():
    h = lambda b: b.hex()
    doc = {"pynacl": nacl.__version__}

    doc["prg"] = [{"seed": h(material(t)), "n": n, "out": h(prg(material(t), n))}
                  for t, n in [(1, 0), (2, 1), (3, 16), (4, 63), (5, 64), (6, 65), (7, 1000), (8, 4099)]]

    doc["prf"] = [{"key": h(material(t)), "label": lab, "out": h(prf(material(t), lab))}
                  for t, lab in [(10, ""), (11, "pps/v1/seed"), (12, "pps/v1/next"), (13, "pps/v1/pub-ratchet"),
                                 (14, "x" * 200)]]

    doc["ratchet"] = []
    for t in (20, 21):
        seeds, key = ratchet(material(t), 6)
        doc["ratchet"].append({"k0": h(material(t)), "seeds": [h(s) for s in seeds], "key6": h(key)})

    doc["labels"] = []
    for t, xs in [(30, [0]), (31, [-1, 0x7FFFFFFF]), (32, [256, -256, -2147483648])]:
        seed = material(t)
        pairs = labels(seed, len(xs))
        doc["labels"].append({"seed": h(seed), "values": xs,
                              "w0": [h(p[0]) for p in pairs], "w1": [h(p[1]) for p in pairs],
                              "published": h(publish(seed, xs))})

    doc["kx"] = []
    for t in (40, 41, 42):
        csk, ssk = material(t), material(t + 100)
        cpk, spk = sodium.crypto_scalarmult_base(csk), sodium.crypto_scalarmult_base(ssk)
        crx, ctx = sodium.crypto_kx_client_session_keys(cpk, csk, spk)
        srx, stx = sodium.crypto_kx_server_session_keys(spk, ssk, cpk)
        doc["kx"].append({"client_sk": h(csk), "server_sk": h(ssk), "client_pk": h(cpk), "server_pk": h(spk),
                          "q": h(sodium.crypto_scalarmult(csk, spk)),
                          "client_rx": h(crx), "client_tx": h(ctx), "server_rx": h(srx), "server_tx": h(stx),
                          "pub_k0": h(prf(ctx, "pps/v1/pub-ratchet"))})

    doc["unmask"] = []
    for t, bits in [(50, 1), (51, 7), (52, 32), (53, 70)]:
        seed = material(t)
        n = (bits + 7) // 8
        r = bytearray(prg(seed, n))
        if bits % 8:
            r[-1] &= (1 << (bits % 8)) - 1
        o = bytearray(material(t + 100, n))
        if bits % 8:
            o[-1] &= (1 << (bits % 8)) - 1
        masked = bytes(a ^ b for a, b in zip(o, r))
        doc["unmask"].append({"seed": h(seed), "bits": bits, "masked": h(masked), "o": h(bytes(o))})

    doc["sealed_key"] = []
    for t in (60, 61):
        key, fkey, nonce = material(t), material(t + 1), material(t + 2, 24)
        rnd, epoch = 1000 + t, t - 59
        ad = ("fn-%d" % t).encode()
        pt = fkey + struct.pack("<QQ", rnd, epoch)
        ct = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(pt, ad, nonce, key)
        doc["sealed_key"].append({"key": h(key), "fn_key": h(fkey), "round": rnd, "epoch": epoch,
                                  "ad": h(ad), "sealed": h(nonce + ct)})

    json.dump(doc, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
