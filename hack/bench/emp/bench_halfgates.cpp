// Obscura's own half-gates baseline program, linked against an unmodified EMP-toolkit emp-tool
// build (https://github.com/emp-toolkit/emp-tool; not vendored here). Built and run by
// hack/bench/gc-vs-emp.sh. Single thread, tables to memory, nothing on the network.
//
// What it measures (all medians over --runs repetitions, one line of JSON per figure on stdout):
//   and_garble / and_evaluate, impl "kernel": emp::halfgates_garble / emp::halfgates_eval (the
//       functions HalfGateGen/HalfGateEva call per AND gate, with emp's MITCCRH<8> re-keyed
//       fixed-key AES) over a batch of --gates independent AND gates; input labels are
//       pre-generated, the 2-block tables go to one preallocated array, output labels to another.
//   and_garble / and_evaluate, impl "backend": the same gates through emp's circuit-execution
//       path: HalfGateGen::and_gate / HalfGateEva::and_gate via Backend::and_gate_n (one virtual
//       call per gate), tables sent through an IOChannel backed by a preallocated memory buffer.
//   circuit_garble / circuit_evaluate: emp::BristolFashion::compute of aes_128.txt and sha256.txt
//       under HalfGateGen / HalfGateEva with the same memory IOChannel; time per circuit.
// Every figure is checked: the evaluator's output labels must decode (against the garbler's
// zero-labels and delta) to the plaintext value of each gate / circuit, and the circuits'
// plaintext outputs are compared with OpenSSL AES-128 and SHA-256 (compression of one block).
// Diagnostics go to stderr; exit status 1 on any mismatch.

#include "emp-tool/emp-tool.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <time.h>

#ifndef EMP_COMMIT
#define EMP_COMMIT "unknown"
#endif

using namespace emp;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
	return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

double thread_cpu_ms() {
	timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// Wall-clock samples (what the figures are, as Go's benchmarks) plus the thread's CPU time over
// the same samples: cpu_share well below 1 means other processes took the core and the figures
// are inflated.
struct Timer {
	Clock::time_point t0;
	double c0 = 0, wall_sum = 0, cpu_sum = 0;
	void start() {
		c0 = thread_cpu_ms();
		t0 = Clock::now();
	}
	double stop() {
		double w = ms_since(t0);
		cpu_sum += thread_cpu_ms() - c0;
		wall_sum += w;
		return w;
	}
	double share() const { return wall_sum > 0 ? cpu_sum / wall_sum : 0; }
};

double median(std::vector<double> v) {
	std::sort(v.begin(), v.end());
	size_t n = v.size();
	return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

[[noreturn]] void fail(const std::string& msg) {
	fprintf(stderr, "bench_halfgates: FAIL: %s\n", msg.c_str());
	exit(1);
}

// A block-aligned, preallocated buffer.
struct Blocks {
	block* p = nullptr;
	size_t n = 0;
	explicit Blocks(size_t n_) : n(n_) {
		p = static_cast<block*>(aligned_alloc(64, ((n * sizeof(block) + 63) / 64) * 64));
		if (!p) fail("out of memory");
		memset(static_cast<void*>(p), 0, n * sizeof(block));  // fault the pages in now
	}
	~Blocks() { free(p); }
	Blocks(const Blocks&) = delete;
	Blocks& operator=(const Blocks&) = delete;
	block& operator[](size_t i) { return p[i]; }
};

// IOChannel that appends sent bytes to a preallocated memory buffer and reads them back in
// order. The garbler writes through it, the evaluator reads what the garbler wrote.
class MemIO : public IOChannel {
public:
	std::vector<char> buf;
	size_t wpos = 0, rpos = 0;
	explicit MemIO(size_t cap) : buf(cap) {}
	void send_data_internal(const void* data, int64_t n) override {
		if (wpos + size_t(n) > buf.size()) fail("MemIO: buffer too small");
		memcpy(buf.data() + wpos, data, size_t(n));
		wpos += size_t(n);
	}
	void recv_data_internal(void* data, int64_t n) override {
		if (rpos + size_t(n) > wpos) fail("MemIO: read past written data");
		memcpy(data, buf.data() + rpos, size_t(n));
		rpos += size_t(n);
	}
};

// emp's backends, with a way to restart the MITCCRH gate counter so that the same labels can be
// garbled repeatedly and the evaluator can follow (the garbler's delta and the shared key seed S
// stay; the first AND after a rewind re-keys exactly as after construction).
class BenchGen : public HalfGateGen {
public:
	using HalfGateGen::HalfGateGen;
	void rewind() {
		mitccrh.setS(mitccrh.start_point);
		mitccrh.key_used = 8;
	}
};
class BenchEva : public HalfGateEva {
public:
	using HalfGateEva::HalfGateEva;
	void rewind() {
		mitccrh.setS(mitccrh.start_point);
		mitccrh.key_used = 8;
	}
};

struct Opts {
	std::string circuits;  // directory holding aes_128.txt and sha256.txt
	size_t gates = size_t(1) << 20;
	int runs = 9;
	double min_ms = 50;  // each circuit sample repeats the circuit for at least this long
	bool and_only = false;
};

void emit_and(const char* what, const char* impl, size_t gates, const std::vector<double>& ms, double share) {
	double m = median(ms);
	double lo = *std::min_element(ms.begin(), ms.end()), hi = *std::max_element(ms.begin(), ms.end());
	printf("{\"bench\":\"%s\",\"impl\":\"%s\",\"gates\":%zu,\"runs\":%zu,\"median_ms\":%.3f,"
	       "\"ands_per_s\":%.0f,\"ns_per_and\":%.3f,\"best_ands_per_s\":%.0f,\"worst_ands_per_s\":%.0f,"
	       "\"cpu_share\":%.3f}\n",
	       what, impl, gates, ms.size(), m, gates / (m / 1e3), m * 1e6 / gates, gates / (lo / 1e3),
	       gates / (hi / 1e3), share);
	fflush(stdout);
}

// ---- (a) independent AND gates -------------------------------------------------------------

void bench_and_kernel(const Opts& o) {
	const size_t n = o.gates;
	Blocks A(n), B(n), Aa(n), Ba(n), W0(n), We(n), T(2 * n);
	std::vector<uint8_t> x(n), y(n);
	PRG prg;
	block delta;
	prg.random_block(&delta, 1);
	delta = set_bit(delta, 0);  // point-and-permute: lsb(delta) = 1, as HalfGateGen does
	block S;
	prg.random_block(&S, 1);
	prg.random_block(A.p, n);
	prg.random_block(B.p, n);
	prg.random_data(x.data(), n);
	prg.random_data(y.data(), n);
	for (size_t i = 0; i < n; ++i) {
		x[i] &= 1;
		y[i] &= 1;
		Aa[i] = x[i] ? A[i] ^ delta : A[i];
		Ba[i] = y[i] ? B[i] ^ delta : B[i];
	}
	MITCCRH<8> gen, eva;

	std::vector<double> tg, te;
	Timer cg, ce;
	for (int r = 0; r < o.runs + 1; ++r) {  // run 0 warms up and is not counted
		if (r == 1) cg = Timer(), ce = Timer();
		gen.setS(S);
		gen.key_used = 8;
		cg.start();
		for (size_t i = 0; i < n; ++i)
			W0[i] = halfgates_garble(A[i], A[i] ^ delta, B[i], B[i] ^ delta, delta, &T[2 * i], &gen);
		double g = cg.stop();

		eva.setS(S);
		eva.key_used = 8;
		ce.start();
		for (size_t i = 0; i < n; ++i) We[i] = halfgates_eval(Aa[i], Ba[i], &T[2 * i], &eva);
		double e = ce.stop();
		if (r > 0) {
			tg.push_back(g);
			te.push_back(e);
		}
	}
	for (size_t i = 0; i < n; ++i) {
		block want = (x[i] & y[i]) ? W0[i] ^ delta : W0[i];
		if (!cmpBlock(&We[i], &want, 1)) fail("kernel: evaluated label of AND gate " + std::to_string(i) + " is wrong");
	}
	emit_and("and_garble", "kernel", n, tg, cg.share());
	emit_and("and_evaluate", "kernel", n, te, ce.share());
}

void bench_and_backend(const Opts& o) {
	const size_t n = o.gates;
	Blocks A(n), B(n), Aa(n), Ba(n), W0(n), We(n);
	std::vector<uint8_t> x(n), y(n);
	MemIO io(n * 2 * sizeof(block) + 4096);
	BenchGen gen(&io);  // sends its 3 setup blocks
	const size_t hdr = io.wpos;
	BenchEva eva(&io);  // reads them
	const block delta = gen.delta;

	PRG prg;
	prg.random_block(A.p, n);
	prg.random_block(B.p, n);
	prg.random_data(x.data(), n);
	prg.random_data(y.data(), n);
	for (size_t i = 0; i < n; ++i) {
		x[i] &= 1;
		y[i] &= 1;
		Aa[i] = x[i] ? A[i] ^ delta : A[i];
		Ba[i] = y[i] ? B[i] ^ delta : B[i];
	}
	std::vector<double> tg, te;
	Timer cg, ce;
	for (int r = 0; r < o.runs + 1; ++r) {
		if (r == 1) cg = Timer(), ce = Timer();
		io.wpos = hdr;
		gen.rewind();
		cg.start();
		gen.and_gate_n(W0.p, A.p, B.p, n);
		double g = cg.stop();

		io.rpos = hdr;
		eva.rewind();
		ce.start();
		eva.and_gate_n(We.p, Aa.p, Ba.p, n);
		double e = ce.stop();
		if (r > 0) {
			tg.push_back(g);
			te.push_back(e);
		}
	}
	if (io.rpos != io.wpos) fail("backend: evaluator did not consume every table");
	for (size_t i = 0; i < n; ++i) {
		block want = (x[i] & y[i]) ? W0[i] ^ delta : W0[i];
		if (!cmpBlock(&We[i], &want, 1)) fail("backend: evaluated label of AND gate " + std::to_string(i) + " is wrong");
	}
	emit_and("and_garble", "backend", n, tg, cg.share());
	emit_and("and_evaluate", "backend", n, te, ce.share());
}

// ---- (b) Bristol Fashion circuits -----------------------------------------------------------

std::vector<uint8_t> plain_eval(const BristolFashion& cf, const std::vector<uint8_t>& in) {
	std::vector<uint8_t> w(cf.num_wire);
	for (int i = 0; i < cf.num_input; ++i) w[i] = in[i];
	for (int i = 0; i < cf.num_gate; ++i) {
		const int* g = &cf.gates[4 * size_t(i)];
		if (g[3] == AND_GATE) w[g[2]] = w[g[0]] & w[g[1]];
		else if (g[3] == XOR_GATE) w[g[2]] = w[g[0]] ^ w[g[1]];
		else w[g[2]] = w[g[0]] ^ 1;
	}
	return std::vector<uint8_t>(w.end() - cf.num_output, w.end());
}

// Bristol Fashion stores a multi-byte value with wire 0 = least significant bit of the last byte
// (the value as one big-endian integer, wires LSB first).
void put_be_bits(std::vector<uint8_t>& bits, size_t at, const uint8_t* bytes, size_t nbytes) {
	for (size_t i = 0; i < nbytes * 8; ++i) bits[at + i] = (bytes[nbytes - 1 - i / 8] >> (i % 8)) & 1;
}
void get_be_bits(uint8_t* bytes, const std::vector<uint8_t>& bits, size_t at, size_t nbytes) {
	memset(bytes, 0, nbytes);
	for (size_t i = 0; i < nbytes * 8; ++i) bytes[nbytes - 1 - i / 8] |= uint8_t(bits[at + i] << (i % 8));
}

// Known answers through OpenSSL, so a wrong circuit file or a mis-wired benchmark cannot pass.
bool aes_kat(const BristolFashion& cf) {
	uint8_t key[16], pt[16], ct[16], got[16];
	for (int i = 0; i < 16; ++i) key[i] = uint8_t(0x2b + 7 * i), pt[i] = uint8_t(0x32 + 13 * i);
	EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
	int len = 0;
	EVP_EncryptInit_ex(c, EVP_aes_128_ecb(), nullptr, key, nullptr);
	EVP_CIPHER_CTX_set_padding(c, 0);
	EVP_EncryptUpdate(c, ct, &len, pt, 16);
	EVP_CIPHER_CTX_free(c);
	std::vector<uint8_t> in(cf.num_input);
	put_be_bits(in, 0, key, 16);  // input 0: key, input 1: plaintext
	put_be_bits(in, 128, pt, 16);
	get_be_bits(got, plain_eval(cf, in), 0, 16);
	return memcmp(got, ct, 16) == 0;
}

bool sha256_kat(const BristolFashion& cf) {
	// One padded block of "abc" compressed from the standard IV must give SHA-256("abc").
	uint8_t block_[64] = {'a', 'b', 'c', 0x80};
	block_[63] = 24;
	static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
	uint8_t ivb[32], want[32], got[32];
	for (int i = 0; i < 8; ++i)
		for (int j = 0; j < 4; ++j) ivb[4 * i + j] = uint8_t(iv[i] >> (24 - 8 * j));
	SHA256(reinterpret_cast<const unsigned char*>("abc"), 3, want);
	std::vector<uint8_t> in(cf.num_input);
	put_be_bits(in, 0, block_, 64);  // input 0: 512-bit block, input 1: 256-bit chaining value
	put_be_bits(in, 512, ivb, 32);
	get_be_bits(got, plain_eval(cf, in), 0, 32);
	return memcmp(got, want, 32) == 0;
}

void bench_circuit(const Opts& o, const char* name, const std::string& path, bool (*kat)(const BristolFashion&)) {
	BristolFashion cf(path.c_str());
	size_t ands = 0;
	for (int i = 0; i < cf.num_gate; ++i) ands += cf.gates[4 * size_t(i) + 3] == AND_GATE;
	bool kat_ok = kat(cf);
	if (!kat_ok) fail(std::string(name) + ": plaintext evaluation does not match OpenSSL");

	MemIO io(ands * 2 * sizeof(block) + 4096);
	BenchGen gen(&io);
	const size_t hdr = io.wpos;
	BenchEva eva(&io);
	const block delta = gen.delta;

	PRG prg;
	std::vector<uint8_t> bits(cf.num_input);
	prg.random_data(bits.data(), bits.size());
	for (auto& b : bits) b &= 1;
	std::vector<Bit> in_g(cf.num_input), in_e(cf.num_input), out_g(cf.num_output), out_e(cf.num_output);
	for (int i = 0; i < cf.num_input; ++i) {
		block l;
		prg.random_block(&l, 1);
		in_g[i] = Bit(l);
		in_e[i] = Bit(bits[i] ? l ^ delta : l);
	}

	auto run_gen = [&] {
		io.wpos = hdr;
		gen.rewind();
		cf.compute(out_g.data(), in_g.data());
	};
	auto run_eva = [&] {
		io.rpos = hdr;
		eva.rewind();
		cf.compute(out_e.data(), in_e.data());
	};
	// Calibrate the repetitions per sample from the fastest of a few warm-ups (a slow one is
	// usually a preempted one).
	double one = 1e9;
	for (int k = 0; k < 5; ++k) {
		backend = &gen;
		auto t0 = Clock::now();
		run_gen();
		one = std::min(one, ms_since(t0));
		backend = &eva;
		run_eva();
	}
	int reps = std::max(1, int(o.min_ms / std::max(one, 1e-3)));

	std::vector<double> tg, te;
	Timer cg, ce;
	for (int r = 0; r < o.runs; ++r) {
		backend = &gen;
		cg.start();
		for (int k = 0; k < reps; ++k) run_gen();
		tg.push_back(cg.stop() / reps);
		backend = &eva;
		ce.start();
		for (int k = 0; k < reps; ++k) run_eva();
		te.push_back(ce.stop() / reps);
	}
	backend = nullptr;
	if (io.rpos != io.wpos) fail(std::string(name) + ": evaluator did not consume every table");

	std::vector<uint8_t> want = plain_eval(cf, bits);
	for (int i = 0; i < cf.num_output; ++i) {
		block z = out_g[i].bit, one_ = out_g[i].bit ^ delta, e = out_e[i].bit;
		int v = cmpBlock(&e, &z, 1) ? 0 : cmpBlock(&e, &one_, 1) ? 1 : -1;
		if (v != want[i]) fail(std::string(name) + ": garbled output bit " + std::to_string(i) + " is wrong");
	}
	for (int pass = 0; pass < 2; ++pass) {
		const std::vector<double>& t = pass ? te : tg;
		double m = median(t);
		printf("{\"bench\":\"%s\",\"circuit\":\"%s\",\"and_gates\":%zu,\"gates\":%d,\"runs\":%zu,"
		       "\"reps_per_run\":%d,\"median_ms\":%.4f,\"best_ms\":%.4f,\"worst_ms\":%.4f,"
		       "\"ands_per_s\":%.0f,\"cpu_share\":%.3f,\"kat\":%s}\n",
		       pass ? "circuit_evaluate" : "circuit_garble", name, ands, cf.num_gate, t.size(), reps, m,
		       *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()),
		       ands / (m / 1e3), (pass ? ce : cg).share(), kat_ok ? "true" : "false");
	}
	fflush(stdout);
}

void usage(int code = 2) {
	fprintf(code ? stderr : stdout,
	        "usage: bench_halfgates --circuits DIR [--gates N] [--runs R] [--min-ms MS] [--and-only]\n"
	        "  DIR holds emp-tool's bristol_fashion/aes_128.txt and sha256.txt\n"
	        "  --gates N    independent AND gates per sample (default 1048576)\n"
	        "  --runs R     samples per figure, median reported (default 9)\n"
	        "  --min-ms MS  a circuit sample repeats the circuit for at least MS ms (default 50)\n"
	        "  --and-only   skip the circuits\n");
	exit(code);
}

}  // namespace

int main(int argc, char** argv) {
	Opts o;
	for (int i = 1; i < argc; ++i) {
		std::string a = argv[i];
		auto next = [&]() -> std::string {
			if (i + 1 >= argc) usage();
			return argv[++i];
		};
		if (a == "--circuits") o.circuits = next();
		else if (a == "--gates") o.gates = std::stoull(next());
		else if (a == "--runs") o.runs = std::stoi(next());
		else if (a == "--min-ms") o.min_ms = std::stod(next());
		else if (a == "--and-only") o.and_only = true;
		else if (a == "--help" || a == "-h") usage(0);
		else usage();
	}
	if (o.runs < 1 || o.gates < 1 || (!o.and_only && o.circuits.empty())) usage();

	printf("{\"bench\":\"meta\",\"emp_commit\":\"%s\",\"compiler\":\"%s\",\"vaes256\":%d,\"vaes512\":%d,"
	       "\"avx2\":%d,\"threads\":1,\"runs\":%d,\"gates\":%zu}\n",
	       EMP_COMMIT, __VERSION__, EMP_HAS_VAES256, EMP_HAS_VAES512, EMP_HAS_AVX2, o.runs, o.gates);
	fflush(stdout);
	bench_and_kernel(o);
	bench_and_backend(o);
	if (!o.and_only) {
		bench_circuit(o, "aes_128", o.circuits + "/aes_128.txt", aes_kat);
		bench_circuit(o, "sha256", o.circuits + "/sha256.txt", sha256_kat);
	}
	return 0;
}
