"""Pretraining a small causal LM on EVM smart-contract bytecode (opcode streams) with FSDP.

Deployed contracts are disassembled to opcodes (PUSH operands bucketed), concatenated with a
contract separator and cut into blocks of `block_size` tokens; the LM is the backbone of a
later vulnerability classifier. Launch with `torchrun --nproc_per_node=8 evm_opcode_lm_fsdp.py`;
each transformer block is its own FSDP unit, parameters in bfloat16 with float32 reductions, and
rank 0 gathers the full state dict.

Source: seed self_attention_mask_guide.txt (section 3); conventions.md section 2.3.
"""

import functools
import math
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.fsdp import FullStateDictConfig, MixedPrecision, ShardingStrategy, StateDictType
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

OPCODES = ["<sep>", "STOP", "ADD", "MUL", "SUB", "DIV", "LT", "GT", "EQ", "ISZERO", "AND", "OR", "NOT", "SHA3",
           "CALLER", "CALLVALUE", "CALLDATALOAD", "CALLDATASIZE", "POP", "MLOAD", "MSTORE", "SLOAD", "SSTORE",
           "JUMP", "JUMPI", "JUMPDEST", "PUSH1", "PUSH4", "PUSH20", "PUSH32", "DUP1", "DUP2", "SWAP1", "SWAP2",
           "LOG1", "CALL", "DELEGATECALL", "RETURN", "REVERT", "SELFDESTRUCT"]


@dataclass
class LMConfig:
    vocab_size: int = len(OPCODES)
    block_size: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        causal = torch.triu(torch.full((cfg.block_size, cfg.block_size), float("-inf")), diagonal=1)
        self.register_buffer("mask", causal, persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att + self.mask[:T, :T]
        att = self.drop(F.softmax(att.float(), dim=-1).type_as(q))
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class OpcodeLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def synth_contract(g):
    body = [OPCODES.index(op) for op in ["PUSH1", "PUSH1", "MSTORE", "CALLVALUE", "DUP1", "ISZERO", "PUSH4", "JUMPI"]]
    for _ in range(int(torch.randint(3, 12, (1,), generator=g))):
        fn = [OPCODES.index(op) for op in ["JUMPDEST", "CALLER", "PUSH20", "EQ", "PUSH4", "JUMPI", "SLOAD"]]
        tail = torch.randint(2, len(OPCODES), (int(torch.randint(2, 8, (1,), generator=g)),), generator=g).tolist()
        body += fn + tail + [OPCODES.index("SSTORE"), OPCODES.index("JUMP")]
    return body + [OPCODES.index("RETURN"), 0]


class BytecodeBlocks(Dataset):
    def __init__(self, n_contracts, block_size, seed):
        g = torch.Generator().manual_seed(seed)
        stream = torch.tensor([tok for _ in range(n_contracts) for tok in synth_contract(g)])
        n = (len(stream) - 1) // block_size
        self.x = stream[: n * block_size].view(n, block_size)
        self.y = stream[1: n * block_size + 1].view(n, block_size)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def main(epochs=3, batch_size=16, lr=3e-4):
    dist.init_process_group("nccl")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    cfg = LMConfig()
    dataset = BytecodeBlocks(4000, cfg.block_size, seed=rank)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)
    wrap_policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
    mp = MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.bfloat16)
    model = FSDP(OpcodeLM(cfg), auto_wrap_policy=wrap_policy, mixed_precision=mp,
                 sharding_strategy=ShardingStrategy.FULL_SHARD, device_id=torch.cuda.current_device())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        model.train()
        for step, (x, y) in enumerate(loader):
            _, loss = model(x.cuda(), y.cuda())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.clip_grad_norm_(1.0)
            optimizer.step()
            if rank == 0 and step % 50 == 0:
                print(f"epoch {epoch} step {step}: loss {loss.item():.4f}")
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(offload_to_cpu=True, rank0_only=True)):
        state = model.state_dict()
    if rank == 0:
        torch.save(state, "opcode_lm.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
