"""torch.npu graphs (NPUGraph capture and replay) are not part of SimNPU yet."""


class NPUGraph:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            "torch.npu.NPUGraph is not implemented in SimNPU yet; run the captured code eagerly"
        )


def graph(*args, **kwargs):
    raise NotImplementedError("torch.npu.graph is not implemented in SimNPU yet")


def make_graphed_callables(*args, **kwargs):
    raise NotImplementedError("torch.npu.make_graphed_callables is not implemented in SimNPU yet")
