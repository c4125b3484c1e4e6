"""A trace-driven kernel compiler: reference.py -> ATen graph -> generated CUDA C++ -> Candidate.

    from solforge.compiler import compile_problem
    res = compile_problem(problem)        # Problem (definition + workloads)
    res.candidate                          # solforge.candidate.Candidate, or None
    res.reason                             # one line when it could not

trace.py (child process, JSON IR) -> lower.py (IR -> loops over index expressions) ->
kernels (codegen.py: pointwise, reduction, matmul, convolution, scan, sort, scatter) ->
plan.py (launches in order, intermediates in the workspace).
"""
