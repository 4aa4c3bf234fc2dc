// llamacpp_anchor times llama.cpp's decoding of one sequence on a GGUF model: tokens/s of
// single-token decode steps (the forward over the key/value cache and the logits), each
// followed by an argmax over the vocabulary, as our generate does per token. Built and run by
// bench/llamacpp_anchor.sh against the libllama of node-llama-cpp's prebuilt Linux x64 package.
//
// The API's structs (model, context and quantization parameters, the batch) are only ever
// taken from llama.cpp's own default functions and handed back, so they are held here as
// opaque blocks larger than any of them: passed by value they travel in memory (System V),
// where the callee reads its own size from the start. The one field written is
// llama_model_quantize_params' ftype, its second int32.
//
// usage: llamacpp_anchor quantize IN.gguf OUT.gguf   (Q4_0, llama.cpp's recipe)
//        llamacpp_anchor time MODEL.gguf THREADS STEPS
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

typedef struct {
	unsigned char b[1024];
} blob;

extern void llama_backend_init(void);
extern void ggml_backend_load_all_from_path(const char *dir);
extern blob llama_model_default_params(void);
extern void *llama_model_load_from_file(const char *path, blob params);
extern int32_t llama_model_desc(const void *model, char *buf, size_t size);
extern uint64_t llama_model_size(const void *model);
extern blob llama_context_default_params(void);
extern void *llama_init_from_model(void *model, blob params);
extern void llama_set_n_threads(void *ctx, int32_t n, int32_t n_batch);
extern blob llama_batch_get_one(int32_t *tokens, int32_t n);
extern int32_t llama_decode(void *ctx, blob batch);
extern float *llama_get_logits_ith(void *ctx, int32_t i);
extern blob llama_model_quantize_default_params(void);
extern uint32_t llama_model_quantize(const char *in, const char *out, const void *params);

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static double cpu(void) {
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
	const char *libdir = getenv("LLAMA_LIB_DIR");
	if (argc < 4 || !libdir) {
		fprintf(stderr, "usage: LLAMA_LIB_DIR=DIR %s quantize IN OUT | time MODEL THREADS STEPS\n", argv[0]);
		return 2;
	}
	llama_backend_init();
	ggml_backend_load_all_from_path(libdir);
	if (strcmp(argv[1], "quantize") == 0) {
		blob q = llama_model_quantize_default_params();
		int32_t nthread = 2, ftype = 2; // LLAMA_FTYPE_MOSTLY_Q4_0
		memcpy(q.b, &nthread, 4);
		memcpy(q.b + 4, &ftype, 4);
		return llama_model_quantize(argv[2], argv[3], &q) == 0 ? 0 : 1;
	}
	if (argc < 5) {
		return 2;
	}
	int threads = atoi(argv[3]), steps = atoi(argv[4]);
	void *model = llama_model_load_from_file(argv[2], llama_model_default_params());
	if (!model) {
		fprintf(stderr, "cannot load %s\n", argv[2]);
		return 1;
	}
	char desc[256];
	llama_model_desc(model, desc, sizeof desc);
	void *ctx = llama_init_from_model(model, llama_context_default_params());
	if (!ctx) {
		fprintf(stderr, "no context\n");
		return 1;
	}
	llama_set_n_threads(ctx, threads, threads);
	const int vocab = 151936, prompt = 16;
	int32_t toks[16];
	for (int i = 0; i < prompt; i++) {
		toks[i] = 300 + 7919 * i % (vocab - 300);
	}
	if (llama_decode(ctx, llama_batch_get_one(toks, prompt)) != 0) {
		fprintf(stderr, "prefill failed\n");
		return 1;
	}
	int32_t next = toks[prompt - 1];
	double *wall = calloc(steps, sizeof(double)), cpu0 = 0, t0;
	for (int s = -2; s < steps; s++) { // two warm-up steps
		if (s == 0) {
			cpu0 = cpu();
		}
		t0 = now();
		if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) {
			fprintf(stderr, "decode failed at step %d\n", s);
			return 1;
		}
		const float *lg = llama_get_logits_ith(ctx, -1);
		int best = 0;
		for (int j = 1; j < vocab; j++) {
			if (lg[j] > lg[best]) {
				best = j;
			}
		}
		next = best < 300 ? 300 + best : best; // stay off the control and byte tokens
		if (s >= 0) {
			wall[s] = now() - t0;
		}
	}
	double cpus = (cpu() - cpu0) / steps;
	// median of the steps' wall time
	for (int i = 1; i < steps; i++) {
		for (int j = i; j > 0 && wall[j - 1] > wall[j]; j--) {
			double t = wall[j];
			wall[j] = wall[j - 1];
			wall[j - 1] = t;
		}
	}
	double med = wall[steps / 2];
	printf("{\"model\": \"%s\", \"bytes\": %llu, \"threads\": %d, \"steps\": %d, \"ms_per_token\": %.2f, "
	       "\"tokens_per_s\": %.2f, \"cpu_ms_per_token\": %.2f}\n",
	       desc, (unsigned long long)llama_model_size(model), threads, steps, 1e3 * med, 1 / med, 1e3 * cpus);
	return 0;
}
