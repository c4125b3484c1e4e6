// The control: a correct kernel. Must pass, with a time.
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: passed
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
}
