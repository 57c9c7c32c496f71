"""torch.save / torch.load of npu tensors and modules with map_location."""

import torch
import torch_npu  # noqa: F401


def test_tensor_round_trip_and_map_location(tmp_path):
    ref = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    path = tmp_path / "t.pt"
    torch.save({"a": ref.npu(), "b": ref.to("npu:1")}, path)
    loaded = torch.load(path)
    assert loaded["a"].device == torch.device("npu:0")
    assert loaded["b"].device == torch.device("npu:1")
    assert torch.equal(loaded["a"].cpu(), ref)
    for loc, expect in [("cpu", "cpu"), ("npu", "npu:0"), ("npu:1", "npu:1")]:
        t = torch.load(path, map_location=loc)
        assert t["a"].device == torch.device(expect)
        assert torch.equal(t["a"].cpu(), ref)


def test_module_round_trip(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    ref = {k: v.clone() for k, v in model.state_dict().items()}
    model.npu()
    assert model.weight.is_npu
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    state = torch.load(path, map_location="npu:1")
    assert all(v.device == torch.device("npu:1") for v in state.values())
    for k, v in state.items():
        assert torch.equal(v.cpu(), ref[k])
    fresh = torch.nn.Linear(4, 3)
    fresh.load_state_dict(torch.load(path, map_location="cpu"))
    assert torch.equal(fresh.weight, ref["weight"])
