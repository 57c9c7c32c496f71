"""DeepSpeed ZeRO, unmodified, on npu over hccl: a tiny LLaMA trained by deepspeed.initialize's
engine for STEPS steps at each ZeRO stage named on the command line, each rank taking its half
of the same global batch. Started by torchrun or by the `deepspeed` launcher (which adds
--local_rank). Rank 0 saves each stage's full trained parameters (gathered from the shards at
stage 3) and the step losses to OUT/stage<N>.pt, for the test to compare with a single-process
run of the same steps (deepspeed_zero_reference below, imported by the test)."""
import argparse
import os

import torch
import torch.distributed as dist
import transformers

import torch_npu  # noqa: F401

STEPS, GLOBAL_BATCH, SEQ, VOCAB, LR, MOMENTUM = 4, 4, 12, 64, 0.5, 0.9


def tiny_llama():
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def batches():
    g = torch.Generator().manual_seed(3)
    return [torch.randint(1, VOCAB, (GLOBAL_BATCH, SEQ), generator=g) for _ in range(STEPS)]


def ds_config(stage: int, world: int) -> dict:
    return {
        "train_batch_size": GLOBAL_BATCH,
        "train_micro_batch_size_per_gpu": GLOBAL_BATCH // world,
        "gradient_accumulation_steps": 1,
        # torch's AdamW (fused on npu) rather than DeepSpeed's FusedAdam: see test_deepspeed.py.
        "optimizer": {"type": "SGD", "params": {"lr": LR, "momentum": MOMENTUM}},
        "zero_allow_untested_optimizer": True,
        "gradient_clipping": 0.0,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 1000,
        "wall_clock_breakdown": False,
    }


def reference(steps: int = STEPS) -> tuple[dict, list[float]]:
    """The single-process run on the CPU: the whole global batch at each step, torch's AdamW
    with the same settings."""
    model = tiny_llama()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    losses = []
    for ids in batches()[:steps]:
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {n: p.detach().clone() for n, p in model.named_parameters()}, losses


def local_shard(engine, stage: int) -> int:
    """How many parameter elements this rank's optimizer holds: all of them without ZeRO,
    about 1/world of them with it (at stage 3 the parameters themselves are partitioned)."""
    opt = engine.optimizer
    if stage == 3:
        return sum(t.numel() for t in opt.fp32_partitioned_groups_flat)
    return sum(t.numel() for t in opt.single_partition_of_fp32_groups)


def train(stage: int, rank: int, world: int) -> tuple[dict, list[float], str, int]:
    import deepspeed

    model = tiny_llama()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=ds_config(stage, world))
    shard = local_shard(engine, stage)
    per_rank = GLOBAL_BATCH // world
    losses = []
    for ids in batches():
        mine = ids[rank * per_rank:(rank + 1) * per_rank].to(engine.device)
        loss = engine(input_ids=mine, labels=mine).loss
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        losses.append(mean.item())
    params = dict(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values()), enabled=stage == 3):
        full = {n: p.detach().cpu().clone() for n, p in params.items()}
    device = str(next(iter(params.values())).device)
    engine.destroy()
    return full, losses, device, shard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--stages", default="1,2,3")
    parser.add_argument("--local_rank", type=int, default=None)  # the deepspeed launcher's
    args = parser.parse_args()
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    local = int(os.environ["LOCAL_RANK"])
    get_accelerator().set_device(local)
    deepspeed.init_distributed()  # the accelerator's backend: hccl
    rank, world = dist.get_rank(), dist.get_world_size()
    for stage in (int(s) for s in args.stages.split(",")):
        full, losses, device, shard = train(stage, rank, world)
        total = sum(p.numel() for p in full.values())
        print(f"rank {rank} zero stage={stage} world={world} backend={dist.get_backend()} "
              f"shard={shard}/{total} "
              f"accelerator={get_accelerator().device_name()} device={device} "
              f"visible={os.environ.get('ASCEND_RT_VISIBLE_DEVICES', '')} "
              f"local_rank_arg={args.local_rank} done", flush=True)
        if rank == 0:
            torch.save({"params": full, "losses": losses},
                       os.path.join(args.out, f"stage{stage}.pt"))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
