"""Motor-insurance claim triage (fast track / standard / special investigations) from the claim's
line items, written in the layout of bentrevett/pytorch-seq2seq's "Attention is All You Need"
notebook.

``Encoder`` / ``EncoderLayer`` / ``MultiHeadAttentionLayer`` with ``fc_q`` / ``fc_k`` / ``fc_v`` /
``fc_o`` and ``scale``, ``PositionwiseFeedforwardLayer``, a wrapper model with ``make_src_mask``,
``train`` / ``evaluate`` functions and ``epoch_time``. Each line item is a damage or treatment
code with its amount; the reserve is regressed on closed claims only.

Source: hyunwoongko/transformer PR #40 and bentrevett/pytorch-seq2seq#96 (conventions.md section 3
item 21).
"""

import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CODES = ["<pad>", "bumper", "door_panel", "windshield", "headlamp", "airbag", "tow", "rental", "total_loss",
         "medical_er", "physio", "chiropractor", "whiplash", "mri", "legal_fees", "glass_only", "paint"]
SOFT_TISSUE = {"physio", "chiropractor", "whiplash", "mri", "legal_fees"}
TRIAGE = ["fast_track", "standard", "siu_referral"]


def simulate_claim(rng):
    kind = rng.choices([0, 1, 2], weights=[0.4, 0.4, 0.2])[0]
    if kind == 0:
        lines = [rng.choice(["glass_only", "windshield", "paint", "headlamp"]) for _ in range(rng.randint(1, 3))]
    elif kind == 1:
        lines = [rng.choice(CODES[1:10]) for _ in range(rng.randint(3, 9))]
    else:
        lines = [rng.choice(["bumper", "paint"])] + [rng.choice(sorted(SOFT_TISSUE)) for _ in range(rng.randint(3, 11))]
    rng.shuffle(lines)
    amounts = [rng.lognormvariate(6.5 if c in SOFT_TISSUE else 6.0, 0.5) for c in lines]
    reserve = math.log1p(sum(amounts) * (1.3 if kind == 2 else 1.0))
    return [CODES.index(c) for c in lines], amounts, kind, reserve, rng.random() < 0.7


def collate(claims, max_len=16):
    b = len(claims)
    src = torch.zeros(b, max_len, dtype=torch.long)
    amount = torch.zeros(b, max_len)
    for i, (codes, amounts, _, _, _) in enumerate(claims):
        src[i, : len(codes)] = torch.tensor(codes)
        amount[i, : len(codes)] = torch.log1p(torch.tensor(amounts)) / 10.0
    return {
        "src": src,
        "amount": amount,
        "triage": torch.tensor([c[2] for c in claims]),
        "reserve": torch.tensor([c[3] for c in claims], dtype=torch.float),
        "closed": torch.tensor([c[4] for c in claims]),
    }


class MultiHeadAttentionLayer(nn.Module):
    def __init__(self, hid_dim, n_heads, dropout):
        super().__init__()
        self.hid_dim, self.n_heads, self.head_dim = hid_dim, n_heads, hid_dim // n_heads
        self.fc_q = nn.Linear(hid_dim, hid_dim)
        self.fc_k = nn.Linear(hid_dim, hid_dim)
        self.fc_v = nn.Linear(hid_dim, hid_dim)
        self.fc_o = nn.Linear(hid_dim, hid_dim)
        self.dropout = nn.Dropout(dropout)
        self.scale = math.sqrt(self.head_dim)

    def forward(self, query, key, value, mask=None):
        batch_size = query.shape[0]
        Q = self.fc_q(query).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        K = self.fc_k(key).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        V = self.fc_v(value).view(batch_size, -1, self.n_heads, self.head_dim).permute(0, 2, 1, 3)
        energy = torch.matmul(Q, K.permute(0, 1, 3, 2)) / self.scale
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=-1)
        x = torch.matmul(self.dropout(attention), V).permute(0, 2, 1, 3).contiguous()
        return self.fc_o(x.view(batch_size, -1, self.hid_dim)), attention


class PositionwiseFeedforwardLayer(nn.Module):
    def __init__(self, hid_dim, pf_dim, dropout):
        super().__init__()
        self.fc_1, self.fc_2 = nn.Linear(hid_dim, pf_dim), nn.Linear(pf_dim, hid_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.fc_2(self.dropout(torch.relu(self.fc_1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, hid_dim, n_heads, pf_dim, dropout):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(hid_dim)
        self.ff_layer_norm = nn.LayerNorm(hid_dim)
        self.self_attention = MultiHeadAttentionLayer(hid_dim, n_heads, dropout)
        self.positionwise_feedforward = PositionwiseFeedforwardLayer(hid_dim, pf_dim, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, src_mask):
        _src, _ = self.self_attention(src, src, src, src_mask)
        src = self.self_attn_layer_norm(src + self.dropout(_src))
        return self.ff_layer_norm(src + self.dropout(self.positionwise_feedforward(src)))


class Encoder(nn.Module):
    def __init__(self, input_dim, hid_dim, n_layers, n_heads, pf_dim, dropout):
        super().__init__()
        self.tok_embedding = nn.Embedding(input_dim, hid_dim)
        self.amount_embedding = nn.Linear(1, hid_dim)
        self.layers = nn.ModuleList([EncoderLayer(hid_dim, n_heads, pf_dim, dropout) for _ in range(n_layers)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, src, amount, src_mask):
        src = self.dropout(self.tok_embedding(src) + self.amount_embedding(amount.unsqueeze(-1)))
        for layer in self.layers:
            src = layer(src, src_mask)
        return src


class ClaimTriageModel(nn.Module):
    def __init__(self, encoder, hid_dim, src_pad_idx):
        super().__init__()
        self.encoder = encoder
        self.src_pad_idx = src_pad_idx
        self.pool_query = nn.Parameter(torch.randn(1, 1, hid_dim) * 0.02)
        self.pool_attention = MultiHeadAttentionLayer(hid_dim, 1, 0.0)
        self.triage_head = nn.Linear(hid_dim, len(TRIAGE))
        self.reserve_head = nn.Linear(hid_dim, 1)

    def make_src_mask(self, src):
        src_mask = (src != self.src_pad_idx).unsqueeze(1).unsqueeze(3)  # expect: MC514 method
        return src_mask

    def forward(self, src, amount):
        src_mask = self.make_src_mask(src)
        enc_src = self.encoder(src, amount, src_mask)
        pool_mask = (src != self.src_pad_idx)[:, None, None, :]
        pooled, _ = self.pool_attention(self.pool_query.expand(src.size(0), -1, -1), enc_src, enc_src, pool_mask)
        pooled = pooled.squeeze(1)
        return self.triage_head(pooled), self.reserve_head(pooled).squeeze(-1)


def compute_loss(model, batch):
    triage_logits, reserve = model(batch["src"], batch["amount"])
    closed = batch["closed"]
    reserve_loss = F.mse_loss(reserve[closed], batch["reserve"][closed] - 8.0)
    return F.cross_entropy(triage_logits, batch["triage"]) + reserve_loss, triage_logits


def train(model, claims, optimizer, clip, rng):
    model.train()
    rng.shuffle(claims)
    epoch_loss = 0.0
    for s in range(0, len(claims), 64):
        loss, _ = compute_loss(model, collate(claims[s : s + 64]))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        epoch_loss += loss.item()
    return epoch_loss / math.ceil(len(claims) / 64)


def evaluate(model, claims):
    model.eval()
    with torch.no_grad():
        batch = collate(claims)
        loss, logits = compute_loss(model, batch)
    return loss.item(), (logits.argmax(-1) == batch["triage"]).float().mean().item()


def epoch_time(start_time, end_time):
    elapsed = end_time - start_time
    return int(elapsed / 60), elapsed - 60 * int(elapsed / 60)


def main():
    torch.manual_seed(0)
    rng = random.Random(0)
    train_claims = [simulate_claim(rng) for _ in range(2400)]
    valid_claims = [simulate_claim(rng) for _ in range(600)]
    enc = Encoder(len(CODES), 64, 2, 4, 128, 0.1)
    model = ClaimTriageModel(enc, 64, src_pad_idx=CODES.index("<pad>"))
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
    for epoch in range(6):
        start_time = time.time()
        train_loss = train(model, train_claims, optimizer, 1.0, rng)
        valid_loss, valid_acc = evaluate(model, valid_claims)
        mins, secs = epoch_time(start_time, time.time())
        print(f"Epoch {epoch + 1:02} | {mins}m {secs:.1f}s | train {train_loss:.3f} | valid {valid_loss:.3f} | triage acc {valid_acc:.3f}")


if __name__ == "__main__":
    main()
