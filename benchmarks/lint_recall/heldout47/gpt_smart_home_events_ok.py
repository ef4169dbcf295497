"""Smart-home activity modelling: a small GPT over ambient sensor events (CASAS-style).

Imitates rasbt/LLMs-from-scratch (chapters 2-5 and the chapter 3 bonus on efficient
multi-head attention): a `GPT_CONFIG` dict, `GPTDatasetV1` with sliding windows of
`max_length` and `stride`, `create_dataloader_v1`, `MultiHeadAttention` with `W_query` /
`W_key` / `W_value` / `out_proj` and the registered `mask` triangle, the bonus
`MHAPyTorchSDPAWithoutFlash` (fused `qkv`, `proj`, SDPA with an explicit mask) selected by
`cfg["attn_impl"]`, `LayerNorm`, `GELU`, `FeedForward`, `TransformerBlock`, `GPTModel`,
`calc_loss_batch` / `calc_loss_loader`, `train_model_simple` with `evaluate_model`, and
`generate_text_simple`. Tokens are sensor events of a single-resident apartment (motion
sensors M0xx, doors D0xx, temperature T0xx), the model predicts the next event.
Synthetic data: days of an Aruba-like routine (sleep, bed to toilet, meal preparation, eat,
wash dishes, relax, work, leave home, enter home, housekeeping), each activity emitting its
own noisy run of sensor events.

Source: rasbt/LLMs-from-scratch#1061 (conventions.md §3 item 14), conventions.md §2.7
and §5 item 1.
"""

import random

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

ACTIVITIES = {
    "Sleep": ["M003_ON", "M003_OFF", "M002_ON", "M002_OFF"],
    "Bed_to_Toilet": ["M004_ON", "M005_ON", "M031_ON", "M031_OFF", "M005_OFF", "M004_OFF"],
    "Meal_Preparation": ["M015_ON", "M017_ON", "D003_OPEN", "D003_CLOSE", "T002_UP", "M017_OFF"],
    "Eat": ["M014_ON", "M014_OFF", "M013_ON", "M013_OFF"],
    "Wash_Dishes": ["M016_ON", "M017_ON", "M016_OFF", "M017_OFF"],
    "Relax": ["M020_ON", "M020_OFF", "M019_ON", "M019_OFF"],
    "Work": ["M026_ON", "M027_ON", "M027_OFF", "M026_OFF"],
    "Leave_Home": ["M008_ON", "D001_OPEN", "D001_CLOSE", "M008_OFF"],
    "Enter_Home": ["D001_OPEN", "M008_ON", "D001_CLOSE", "M009_ON"],
    "Housekeeping": ["M010_ON", "M022_ON", "M010_OFF", "M022_OFF", "M012_ON"],
}
ROUTINE = ["Sleep", "Bed_to_Toilet", "Sleep", "Meal_Preparation", "Eat", "Wash_Dishes",
           "Leave_Home", "Enter_Home", "Work", "Meal_Preparation", "Eat", "Relax",
           "Housekeeping", "Relax", "Sleep"]

GPT_CONFIG = {
    "vocab_size": 0,
    "context_length": 32,
    "emb_dim": 48,
    "n_heads": 4,
    "n_layers": 2,
    "drop_rate": 0.1,
    "qkv_bias": False,
    "attn_impl": "sdpa",
}


class GPTDatasetV1(Dataset):
    def __init__(self, token_ids, max_length, stride):
        self.input_ids = []
        self.target_ids = []
        for i in range(0, len(token_ids) - max_length, stride):
            self.input_ids.append(torch.tensor(token_ids[i:i + max_length]))
            self.target_ids.append(torch.tensor(token_ids[i + 1: i + max_length + 1]))

    def __len__(self):
        return len(self.input_ids)

    def __getitem__(self, idx):
        return self.input_ids[idx], self.target_ids[idx]


def create_dataloader_v1(token_ids, batch_size=4, max_length=32, stride=16, shuffle=True, drop_last=True):
    dataset = GPTDatasetV1(token_ids, max_length, stride)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "d_out must be divisible by num_heads"
        self.d_out = d_out
        self.num_heads = num_heads
        self.head_dim = d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

    def forward(self, x):
        b, num_tokens, d_in = x.shape
        keys = self.W_key(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        queries = self.W_query(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        values = self.W_value(x).view(b, num_tokens, self.num_heads, self.head_dim).transpose(1, 2)
        attn_scores = queries @ keys.transpose(2, 3)
        mask_bool = self.mask.bool()[:num_tokens, :num_tokens]
        attn_scores = attn_scores.masked_fill(mask_bool, -torch.inf)
        attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
        attn_weights = self.dropout(attn_weights)
        context_vec = (attn_weights @ values).transpose(1, 2)
        context_vec = context_vec.contiguous().view(b, num_tokens, self.d_out)
        return self.out_proj(context_vec)


class MHAPyTorchSDPAWithoutFlash(nn.Module):
    def __init__(self, d_in, d_out, num_heads, context_length, dropout=0.0, qkv_bias=False):
        super().__init__()
        assert d_out % num_heads == 0, "embed_dim is indivisible by num_heads"
        self.num_heads = num_heads
        self.context_length = context_length
        self.head_dim = d_out // num_heads
        self.d_out = d_out
        self.qkv = nn.Linear(d_in, 3 * d_out, bias=qkv_bias)
        self.proj = nn.Linear(d_out, d_out)
        self.dropout = dropout
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        batch_size, num_tokens, embed_dim = x.shape
        qkv = self.qkv(x)
        qkv = qkv.view(batch_size, num_tokens, 3, self.num_heads, self.head_dim)
        qkv = qkv.permute(2, 0, 3, 1, 4)
        queries, keys, values = qkv
        use_dropout = 0.0 if not self.training else self.dropout
        attn_mask = ~self.mask[:num_tokens, :num_tokens]
        context_vec = nn.functional.scaled_dot_product_attention(queries, keys, values, attn_mask=attn_mask, dropout_p=use_dropout, is_causal=False)
        context_vec = context_vec.transpose(1, 2).contiguous().view(batch_size, num_tokens, self.d_out)
        return self.proj(context_vec)


class LayerNorm(nn.Module):
    def __init__(self, emb_dim):
        super().__init__()
        self.eps = 1e-5
        self.scale = nn.Parameter(torch.ones(emb_dim))
        self.shift = nn.Parameter(torch.zeros(emb_dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.scale * (x - mean) / torch.sqrt(var + self.eps) + self.shift


class GELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1 + torch.tanh(torch.sqrt(torch.tensor(2.0 / torch.pi)) * (x + 0.044715 * torch.pow(x, 3))))


class FeedForward(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(cfg["emb_dim"], 4 * cfg["emb_dim"]), GELU(),
                                    nn.Linear(4 * cfg["emb_dim"], cfg["emb_dim"]))

    def forward(self, x):
        return self.layers(x)


class TransformerBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg["attn_impl"] == "sdpa":
            self.att = MHAPyTorchSDPAWithoutFlash(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"], num_heads=cfg["n_heads"],
                                                  context_length=cfg["context_length"], dropout=cfg["drop_rate"],
                                                  qkv_bias=cfg["qkv_bias"])
        else:
            self.att = MultiHeadAttention(d_in=cfg["emb_dim"], d_out=cfg["emb_dim"], context_length=cfg["context_length"],
                                          num_heads=cfg["n_heads"], dropout=cfg["drop_rate"], qkv_bias=cfg["qkv_bias"])
        self.ff = FeedForward(cfg)
        self.norm1 = LayerNorm(cfg["emb_dim"])
        self.norm2 = LayerNorm(cfg["emb_dim"])
        self.drop_shortcut = nn.Dropout(cfg["drop_rate"])

    def forward(self, x):
        shortcut = x
        x = self.drop_shortcut(self.att(self.norm1(x))) + shortcut
        shortcut = x
        return self.drop_shortcut(self.ff(self.norm2(x))) + shortcut


class GPTModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"])
        self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])
        self.drop_emb = nn.Dropout(cfg["drop_rate"])
        self.trf_blocks = nn.Sequential(*[TransformerBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final_norm = LayerNorm(cfg["emb_dim"])
        self.out_head = nn.Linear(cfg["emb_dim"], cfg["vocab_size"], bias=False)

    def forward(self, in_idx):
        batch_size, seq_len = in_idx.shape
        x = self.tok_emb(in_idx) + self.pos_emb(torch.arange(seq_len, device=in_idx.device))
        x = self.trf_blocks(self.drop_emb(x))
        return self.out_head(self.final_norm(x))


def calc_loss_batch(input_batch, target_batch, model):
    logits = model(input_batch)
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target_batch.flatten())


def calc_loss_loader(data_loader, model, num_batches=None):
    total_loss = 0.0
    num_batches = len(data_loader) if num_batches is None else min(num_batches, len(data_loader))
    for i, (input_batch, target_batch) in enumerate(data_loader):
        if i >= num_batches:
            break
        total_loss += calc_loss_batch(input_batch, target_batch, model).item()
    return total_loss / num_batches


def evaluate_model(model, train_loader, val_loader, eval_iter):
    model.eval()
    with torch.no_grad():
        train_loss = calc_loss_loader(train_loader, model, num_batches=eval_iter)
        val_loss = calc_loss_loader(val_loader, model, num_batches=eval_iter)
    model.train()
    return train_loss, val_loss


def train_model_simple(model, train_loader, val_loader, optimizer, num_epochs, eval_freq, eval_iter):
    global_step = -1
    for epoch in range(num_epochs):
        model.train()
        for input_batch, target_batch in train_loader:
            optimizer.zero_grad()
            loss = calc_loss_batch(input_batch, target_batch, model)
            loss.backward()
            optimizer.step()
            global_step += 1
            if global_step % eval_freq == 0:
                train_loss, val_loss = evaluate_model(model, train_loader, val_loader, eval_iter)
                print(f"Ep {epoch + 1} (Step {global_step:06d}): Train loss {train_loss:.3f}, Val loss {val_loss:.3f}")


def generate_text_simple(model, idx, max_new_tokens, context_size):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -context_size:]
        with torch.no_grad():
            logits = model(idx_cond)
        idx_next = torch.argmax(torch.softmax(logits[:, -1, :], dim=-1), dim=-1, keepdim=True)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def simulate_days(n_days, rng):
    events = []
    for _ in range(n_days):
        for activity in ROUTINE:
            if rng.random() < 0.1:
                continue
            pattern = ACTIVITIES[activity]
            events.extend(pattern[: max(2, len(pattern) - rng.randrange(2))])
    return events


def main():
    torch.manual_seed(123)
    rng = random.Random(123)
    vocab = sorted({e for p in ACTIVITIES.values() for e in p})
    stoi = {e: i for i, e in enumerate(vocab)}
    train_ids = [stoi[e] for e in simulate_days(60, rng)]
    val_ids = [stoi[e] for e in simulate_days(6, rng)]
    cfg = dict(GPT_CONFIG, vocab_size=len(vocab))
    train_loader = create_dataloader_v1(train_ids, batch_size=16, max_length=cfg["context_length"], stride=8)
    val_loader = create_dataloader_v1(val_ids, batch_size=16, max_length=cfg["context_length"], stride=8,
                                      shuffle=False, drop_last=False)
    model = GPTModel(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    train_model_simple(model, train_loader, val_loader, optimizer, num_epochs=6, eval_freq=60, eval_iter=5)
    model.eval()
    hits, total = 0, 0
    for start in range(0, len(val_ids) - cfg["context_length"] - 1, 7):
        context = torch.tensor([val_ids[start:start + cfg["context_length"]]])
        predicted = generate_text_simple(model, context, max_new_tokens=1, context_size=cfg["context_length"])
        hits += int(predicted[0, -1].item() == val_ids[start + cfg["context_length"]])
        total += 1
    print(f"next-event accuracy on held-out days: {hits / total:.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
