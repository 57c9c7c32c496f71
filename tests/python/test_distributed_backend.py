"""The "hccl" backend as torch.distributed sees it, in one process (world size 1): registration,
init_process_group with and without a backend name, the Python class, and the environment
variables' validation (each bad value is a clear error naming the variable)."""


def test_hccl_is_registered_for_npu_and_is_the_default(python):
    r = python("""
        import torch, torch_npu, torch.distributed as dist
        assert torch_npu.distributed.is_hccl_available() and dist.is_hccl_available()
        assert "hccl" in dist.Backend.backend_list
        assert dist.Backend.default_device_backend_map["npu"] == "hccl"
        # No backend named: the accelerator (npu) picks hccl.
        dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
        print("backend", dist.get_backend_config())
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("npu"))
        print("class", type(backend).__name__, isinstance(backend, dist.ProcessGroup) or
              isinstance(backend, torch._C._distributed_c10d.Backend))
        x = torch.arange(6.0, device="npu")
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
        w = dist.all_reduce(x, op=dist.ReduceOp.MAX, async_op=True)
        w.wait()
        print("values", x.cpu().tolist(), w.is_completed())
        dist.barrier()
        dist.destroy_process_group()
    """)
    assert r.returncode == 0, r.stderr
    assert "backend npu:hccl" in r.stdout
    assert "class ProcessGroupHCCL True" in r.stdout
    assert "values [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] True" in r.stdout


def test_bad_environment_values_are_clear_errors(python):
    r = python("""
        import os, torch, torch_npu, torch.distributed as dist
        cases = [("HCCL_CONNECT_TIMEOUT", "soon"), ("HCCL_CONNECT_TIMEOUT", "0"),
                 ("HCCL_EXEC_TIMEOUT", "-5"), ("HCCL_BUFFSIZE", "0"), ("HCCL_BUFFSIZE", "1e3"),
                 ("TORCH_HCCL_ASYNC_ERROR_HANDLING", "7"), ("HCCL_WHITELIST_DISABLE", "yes"),
                 ("HCCL_BLOCKING_WAIT", "2")]
        for name, value in cases:
            os.environ[name] = value
            try:
                dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
            except ValueError as e:
                text = str(e)
                print("ERROR", name, value, name in text and value in text, "ERR02001 DIST" in text)
            else:
                print("NO ERROR", name, value)
                dist.destroy_process_group()
            del os.environ[name]
        # Good values are accepted.
        os.environ.update(HCCL_CONNECT_TIMEOUT="30", HCCL_EXEC_TIMEOUT="60", HCCL_BUFFSIZE="16",
                          TORCH_HCCL_ASYNC_ERROR_HANDLING="2", HCCL_WHITELIST_DISABLE="1")
        dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1)
        x = torch.ones(3, device="npu"); dist.all_reduce(x); print("good", x.cpu().tolist())
    """)
    assert r.returncode == 0, r.stderr
    lines = [l for l in r.stdout.splitlines() if "ERROR" in l]
    assert len(lines) == 8, r.stdout + r.stderr
    for line in lines:
        assert line.startswith("ERROR") and line.endswith("True True"), line
    assert "good [1.0, 1.0, 1.0]" in r.stdout


def test_gloo_for_cpu_and_hccl_for_npu_in_one_group(python):
    r = python("""
        import torch, torch_npu, torch.distributed as dist
        dist.init_process_group("cpu:gloo,npu:hccl", store=dist.HashStore(), rank=0, world_size=1)
        a, b = torch.ones(2), torch.ones(2, device="npu")
        dist.all_reduce(a); dist.all_reduce(b)
        print(a.tolist(), b.cpu().tolist())
    """)
    assert r.returncode == 0, r.stderr
    assert "[1.0, 1.0] [1.0, 1.0]" in r.stdout


def test_options_object_is_refused_clearly(python):
    r = python("""
        import torch, torch_npu, torch.distributed as dist
        try:
            dist.init_process_group("hccl", store=dist.HashStore(), rank=0, world_size=1,
                                    pg_options=object())
        except NotImplementedError as e:
            print("refused:", e)
    """)
    assert "refused:" in r.stdout and "timeout=" in r.stdout, r.stdout + r.stderr
