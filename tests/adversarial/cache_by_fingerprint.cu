// Keeps the answers for up to 8 inputs in device memory, keyed by a fingerprint of the input data,
// and copies the stored answer when the fingerprint matches. Always correct, but timed on inputs it
// has seen before it is far faster than on new ones: the caching probe must reject it.
// launches: [{"kernel": "lookup", "grid": [1], "block": [1], "args": ["x", "y", "int32:n"]}, {"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}, {"kernel": "commit", "grid": [1], "block": [1], "args": []}]
// expect: rejected caching
#define SLOTS 8
#define CAP (1 << 20)
__device__ unsigned long long g_fp[SLOTS];
__device__ int g_valid[SLOTS];
__device__ float g_store[SLOTS][CAP];
__device__ int g_hit, g_slot;
__device__ unsigned long long g_cur;
extern "C" __global__ void lookup(const float* x, const float* y, int n) {
    unsigned long long h = 1469598103934665603ull;
    for (int k = 0; k < 16; ++k) {
        h = (h ^ __float_as_uint(x[(k * 7919) % n])) * 1099511628211ull;
        h = (h ^ __float_as_uint(y[(k * 104729) % n])) * 1099511628211ull;
    }
    int slot = (int)(h % SLOTS);
    g_cur = h; g_slot = slot;
    g_hit = (n <= CAP && g_valid[slot] && g_fp[slot] == h) ? 1 : 0;
}
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (g_hit) { out[i] = g_store[g_slot][i]; return; }
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
    if (n <= CAP) g_store[g_slot][i] = z;
}
extern "C" __global__ void commit() {
    if (!g_hit) { g_fp[g_slot] = g_cur; g_valid[g_slot] = 1; }
}
