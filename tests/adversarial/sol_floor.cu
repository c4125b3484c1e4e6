// Correct, but the caller says the speed of light is 1000 ms: a time far below T_sol is impossible,
// so the evaluator must reject it (settings.sol_floor_fraction).
// launches: [{"kernel": "sin_chain", "grid": ["ceil_div(n, 256)"], "block": [256], "args": ["x", "y", "out", "int32:n"]}]
// expect: rejected sol_floor
// t_sol_ms: 1000
extern "C" __global__ void sin_chain(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float z = x[i], b = y[i];
    for (int k = 0; k < 64; ++k) z = sinf(z) + b;
    out[i] = z;
}
