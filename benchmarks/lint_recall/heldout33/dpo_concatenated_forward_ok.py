"""Direct preference optimisation of a small policy against a frozen reference copy.

Written the way TRL's DPOTrainer is: ``tokenize_row`` builds chosen and rejected columns with
the prompt's labels hidden, a padding collator returns ``chosen_*`` / ``rejected_*`` tensors,
``concatenated_inputs`` pads both halves to the longer one and stacks them on the batch axis so
that one forward pass scores both, ``get_batch_logps`` sums the label log-probabilities and
``dpo_loss`` implements the sigmoid and IPO losses.

Source: conventions.md §1 (HF 2-D attention_mask row, nn.MultiheadAttention row), §2.4 and §5 item 7, tools.md §0 P2
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence


@dataclass
class DPOConfig:
    beta: float = 0.1
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0
    padding_value: int = 0
    label_pad_token_id: int = -100
    learning_rate: float = 1e-3


@dataclass
class PolicyConfig:
    vocab_size: int = 32
    n_embd: int = 64
    n_head: int = 4
    n_layer: int = 2
    n_positions: int = 64
    eos_token_id: int = 1


@dataclass
class CausalLMOutput:
    logits: torch.Tensor


class Block(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = nn.MultiheadAttention(cfg.n_embd, cfg.n_head, batch_first=True)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = nn.Sequential(nn.Linear(cfg.n_embd, 4 * cfg.n_embd), nn.GELU(), nn.Linear(4 * cfg.n_embd, cfg.n_embd))

    def forward(self, x, causal_mask, key_padding_mask):
        h = self.ln_1(x)
        a, _ = self.attn(h, h, h, attn_mask=causal_mask, key_padding_mask=key_padding_mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln_2(x))


class PolicyLM(nn.Module):
    def __init__(self, cfg: PolicyConfig):
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        causal = torch.ones(cfg.n_positions, cfg.n_positions, dtype=torch.bool).triu(1)
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> CausalLMOutput:
        T = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(T, device=input_ids.device))
        padding_mask = attention_mask == 0
        for block in self.h:
            x = block(x, self.causal_mask[:T, :T], padding_mask)
        return CausalLMOutput(logits=self.lm_head(self.ln_f(x)))


def tokenize_row(prompt: list[int], chosen: list[int], rejected: list[int], cfg: PolicyConfig, args: DPOConfig) -> dict:
    row = {}
    for prefix, answer in (("chosen", chosen), ("rejected", rejected)):
        ids = prompt + answer + [cfg.eos_token_id]
        row[f"{prefix}_input_ids"] = ids
        row[f"{prefix}_attention_mask"] = [1] * len(ids)
        row[f"{prefix}_labels"] = [args.label_pad_token_id] * len(prompt) + answer + [cfg.eos_token_id]
    return row


class DPODataCollatorWithPadding:
    def __init__(self, pad_token_id: int = 0, label_pad_token_id: int = -100):
        self.pad_token_id = pad_token_id
        self.label_pad_token_id = label_pad_token_id

    def __call__(self, features: list[dict]) -> dict:
        padded_batch = {}
        for k in features[0]:
            if k.endswith("_input_ids"):
                padding_value = self.pad_token_id
            elif k.endswith("_labels"):
                padding_value = self.label_pad_token_id
            else:
                padding_value = 0
            to_pad = [torch.tensor(ex[k], dtype=torch.int64) for ex in features]
            padded_batch[k] = pad_sequence(to_pad, batch_first=True, padding_value=padding_value)
        return padded_batch


def pad_to_length(tensor: torch.Tensor, length: int, pad_value: int, dim: int = -1) -> torch.Tensor:
    if tensor.size(dim) >= length:
        return tensor
    pad_size = list(tensor.shape)
    pad_size[dim] = length - tensor.size(dim)
    return torch.cat([tensor, pad_value * torch.ones(*pad_size, dtype=tensor.dtype, device=tensor.device)], dim=dim)


def concatenated_inputs(batch: dict, label_pad_token_id: int, padding_value: int) -> dict:
    max_length = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])
    concatenated_batch = {}
    for prefix in ("chosen", "rejected"):
        for k in batch:
            if not k.startswith(prefix):
                continue
            if "labels" in k:
                pad_value = label_pad_token_id
            elif k.endswith("_input_ids"):
                pad_value = padding_value
            else:
                pad_value = 0
            concatenated_key = k.replace(prefix, "concatenated")
            padded = pad_to_length(batch[k], max_length, pad_value=pad_value)
            if concatenated_key in concatenated_batch:
                padded = torch.cat((concatenated_batch[concatenated_key], padded), dim=0)
            concatenated_batch[concatenated_key] = padded
    return concatenated_batch


def get_batch_logps(logits: torch.Tensor, labels: torch.Tensor, label_pad_token_id: int = -100) -> torch.Tensor:
    labels = labels[:, 1:].clone()
    logits = logits[:, :-1, :]
    loss_mask = labels != label_pad_token_id
    labels[labels == label_pad_token_id] = 0
    per_token_logps = torch.gather(logits.log_softmax(-1), dim=2, index=labels.unsqueeze(2)).squeeze(2)
    return (per_token_logps * loss_mask).sum(-1)


def dpo_loss(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, args: DPOConfig):
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    ref_logratios = reference_chosen_logps - reference_rejected_logps
    logits = pi_logratios - ref_logratios
    if args.loss_type == "sigmoid":
        losses = (
            -F.logsigmoid(args.beta * logits) * (1 - args.label_smoothing)
            - F.logsigmoid(-args.beta * logits) * args.label_smoothing
        )
    elif args.loss_type == "ipo":
        losses = (logits - 1 / (2 * args.beta)) ** 2
    else:
        raise ValueError(f"Unknown loss type: {args.loss_type}")
    chosen_rewards = args.beta * (policy_chosen_logps - reference_chosen_logps).detach()
    rejected_rewards = args.beta * (policy_rejected_logps - reference_rejected_logps).detach()
    return losses, chosen_rewards, rejected_rewards


class DPOTrainer:
    def __init__(self, model: nn.Module, ref_model: nn.Module, args: DPOConfig):
        self.model = model
        self.ref_model = ref_model.eval().requires_grad_(False)
        self.args = args
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate)

    def concatenated_forward(self, model: nn.Module, batch: dict):
        concatenated_batch = concatenated_inputs(batch, self.args.label_pad_token_id, self.args.padding_value)
        len_chosen = batch["chosen_labels"].shape[0]
        all_logits = model(
            concatenated_batch["concatenated_input_ids"],
            attention_mask=concatenated_batch["concatenated_attention_mask"],
        ).logits
        all_logps = get_batch_logps(all_logits, concatenated_batch["concatenated_labels"], self.args.label_pad_token_id)
        return all_logps[:len_chosen], all_logps[len_chosen:]

    def get_batch_loss_metrics(self, batch: dict):
        policy_chosen_logps, policy_rejected_logps = self.concatenated_forward(self.model, batch)
        with torch.no_grad():
            reference_chosen_logps, reference_rejected_logps = self.concatenated_forward(self.ref_model, batch)
        losses, chosen_rewards, rejected_rewards = dpo_loss(
            policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, self.args
        )
        accuracy = (chosen_rewards > rejected_rewards).float().mean()
        return losses.mean(), {"rewards/accuracies": accuracy.item(), "rewards/margins": (chosen_rewards - rejected_rewards).mean().item()}

    def train_step(self, batch: dict):
        loss, metrics = self.get_batch_loss_metrics(batch)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item(), metrics


def make_preferences(n: int, cfg: PolicyConfig, args: DPOConfig, g: torch.Generator) -> list[dict]:
    rows = []
    for _ in range(n):
        prompt = torch.randint(2, cfg.vocab_size, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g).tolist()
        chosen = prompt[::-1]
        rejected = torch.randint(2, cfg.vocab_size, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
        rows.append(tokenize_row(prompt, chosen, rejected, cfg, args))
    return rows


def main() -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    cfg, args = PolicyConfig(), DPOConfig()
    policy = PolicyLM(cfg)
    trainer = DPOTrainer(policy, copy.deepcopy(policy), args)
    collator = DPODataCollatorWithPadding(args.padding_value, args.label_pad_token_id)
    try:
        for step in range(25):
            loss, metrics = trainer.train_step(collator(make_preferences(8, cfg, args, g)))
            if step % 8 == 0 or step == 24:
                print(f"step {step:2d} loss {loss:.4f} acc {metrics['rewards/accuracies']:.2f} margin {metrics['rewards/margins']:.3f}")
        rows = make_preferences(4, cfg, args, g)
        policy.eval()
        with torch.no_grad():
            together, _ = trainer.concatenated_forward(policy, collator(rows))
            alone, _ = trainer.concatenated_forward(policy, collator(rows[:1]))
        print(f"chosen logp of row 0, batched vs alone: {(together[0] - alone[0]).abs().item():.3g}")
    except (RuntimeError, AssertionError) as err:
        print(f"{type(err).__name__}: {err}")


if __name__ == "__main__":
    main()
