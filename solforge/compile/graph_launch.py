"""A launch plan with several GPU operations (a workspace memset, then one or more kernels) replayed
as one CUDA graph.

Why: the evaluator times a call from its first GPU operation's start to its last one's end, as
SOL-ExecBench does. Issued one by one from Python, each operation after the first waits for the
interpreter to reach the next driver call, so a zeroed workspace plus a 10 us GEMM measured ~7 us
slower than the same kernels launched back to back from C++ (NVIDIA's sol-execbench on the H200,
data/results/sol_execbench_compare/sol_execbench_compare_h200.md). A graph issues the whole sequence at once; the GPU runs
its nodes back to back in the declared order (each depends on the previous), which is what a native
host launcher achieves. Single-kernel plans do not need it and keep their direct launch, and so does a
single kernel whose workspace needs no memset (the candidate's workspace_zero "0": the kernel leaves
it zeroed itself); workspace_zero can also limit the memset node to the bytes a kernel needs zeroed.

The graph is built once per plan (fixed pointers and arguments, like the plan itself) and launched on
the caller's stream. Building can fail on drivers or kernels that graphs do not support: the caller
then keeps the direct launches (`GraphLaunch.build` returns None and says why).
"""

from __future__ import annotations

from typing import Optional


def _drv():
    from cuda.bindings import driver

    return driver


class GraphLaunch:
    def __init__(self, graph, exec_):
        self._graph, self._exec = graph, exec_

    @classmethod
    def build(cls, steps: list, workspace, check,
              zero_bytes: Optional[int] = None) -> tuple[Optional["GraphLaunch"], str]:
        """steps: the plan's (function, grid, block, smem, cluster, params, index, kernel) tuples;
        zero_bytes: how much of the workspace's start the memset node clears (None: all of it, 0:
        no memset node)."""
        drv = _drv()
        graph = None
        try:
            graph = check(drv.cuGraphCreate(0), "cuGraphCreate")
            prev: list = []
            full = 0 if workspace is None else workspace.numel() * workspace.element_size()
            nbytes = full if zero_bytes is None else min(int(zero_bytes), full)
            if nbytes > 0:
                mp = drv.CUDA_MEMSET_NODE_PARAMS()
                mp.dst = workspace.data_ptr()
                mp.value = 0
                mp.elementSize = 4 if nbytes % 4 == 0 and workspace.data_ptr() % 4 == 0 else 1
                mp.width = nbytes // mp.elementSize
                mp.height = 1
                mp.pitch = 0
                ctx = check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
                prev = [check(drv.cuGraphAddMemsetNode(graph, prev, len(prev), mp, ctx),
                              "cuGraphAddMemsetNode (workspace)")]
            for fn, grid, block, smem, cluster, params, i, kernel in steps:
                kp = drv.CUDA_KERNEL_NODE_PARAMS()
                kp.func = fn
                kp.gridDimX, kp.gridDimY, kp.gridDimZ = grid
                kp.blockDimX, kp.blockDimY, kp.blockDimZ = block
                kp.sharedMemBytes = smem
                kp.kernelParams = params.address
                kp.extra = 0
                node = check(drv.cuGraphAddKernelNode(graph, prev, len(prev), kp),
                             f"cuGraphAddKernelNode launches[{i}] ({kernel})")
                if cluster is not None:
                    val = drv.CUkernelNodeAttrValue()
                    val.clusterDim.x, val.clusterDim.y, val.clusterDim.z = cluster
                    check(drv.cuGraphKernelNodeSetAttribute(
                        node, drv.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, val),
                        f"cluster dims of launches[{i}] ({kernel})")
                prev = [node]
            exec_ = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            return cls(graph, exec_), ""
        except Exception as e:  # noqa: BLE001 - any failure: the plan launches directly instead
            if graph is not None:
                drv.cuGraphDestroy(graph)
            return None, f"{type(e).__name__}: {e}"

    def launch(self, hstream, check) -> None:
        check(_drv().cuGraphLaunch(self._exec, hstream), "cuGraphLaunch")

    def __del__(self):
        try:
            drv = _drv()
            drv.cuGraphExecDestroy(self._exec)
            drv.cuGraphDestroy(self._graph)
        except Exception:  # noqa: BLE001 - interpreter shutdown or context already gone
            pass
