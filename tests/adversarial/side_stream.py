"""Launches its (correct) kernels on a stream of its own and returns without joining it: timing with
events on the given stream would see nothing. The CUPTI records show the stream; the side-stream
guard must reject it. Needs the cubins of good.cu staged beside it (GPU only)."""

EXPECT = ("rejected", "side_stream")
ALLOW_TORCH = False
NEEDS_CUBINS = "good.cu"
_stream = None


def run(inputs, outputs, ctx):
    global _stream
    from cuda.bindings import driver

    if _stream is None:
        err, _stream = driver.cuStreamCreate(1)  # CU_STREAM_NON_BLOCKING
    ctx.launch(stream=int(_stream))
