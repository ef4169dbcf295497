"""PyTorch forum question: "nn.Transformer reaches ~0 loss on a copy task, but greedy decoding is garbage".

The poster's copy-task script: `nn.Transformer` (batch_first), teacher forcing with a boolean
look-ahead mask they build themselves for training ("the float mask gave NaN for me once"), and
greedy decoding that uses the model's own `model.generate_square_subsequent_mask(i)` (instance
form), as in the tutorial they followed. The tail of the script is the check a reply suggested:
does the decoder output at position 0 depend on the last target token?

Source: pytorch/pytorch#29546 (flipped look-ahead mask: early tokens see the future),
rasbt/LLMs-from-scratch#1061 (a triangle in the wrong convention for the API), conventions.md §1
(nn.Transformer row: bool masks are True = drop) and §3 items 9 and 14.
"""
import torch
from torch import nn

torch.manual_seed(0)

V, D, BOS, T = 12, 32, 1, 6

model = nn.Transformer(D, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=64, dropout=0.0, batch_first=True)
emb = nn.Embedding(V, D)
pos = nn.Parameter(torch.randn(T + 1, D) * 0.1)
out = nn.Linear(D, V)
params = list(model.parameters()) + list(emb.parameters()) + [pos] + list(out.parameters())
opt = torch.optim.Adam(params, lr=3e-3)


def embed(tokens):
    return emb(tokens) + pos[: tokens.shape[1]]


def decode_logits(src, tgt_in, tgt_mask):
    h = model(embed(src), embed(tgt_in), tgt_mask=tgt_mask)
    return out(h)


for step in range(150):
    src = torch.randint(2, V, (32, T))
    tgt_in = torch.cat([torch.full((32, 1), BOS), src[:, :-1]], dim=1)
    tgt_mask = torch.triu(torch.ones(T, T), diagonal=1) == 1
    logits = decode_logits(src, tgt_in, tgt_mask)
    loss = nn.functional.cross_entropy(logits.reshape(-1, V), src.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("final training loss:", round(loss.item(), 4))

model.eval()
with torch.no_grad():
    src = torch.randint(2, V, (64, T))
    ys = torch.full((64, 1), BOS)
    for i in range(T):
        mask = model.generate_square_subsequent_mask(ys.shape[1])
        nxt = decode_logits(src, ys, mask)[:, -1].argmax(-1, keepdim=True)
        ys = torch.cat([ys, nxt], dim=1)
    print("greedy copy accuracy:", (ys[:, 1:] == src).float().mean().item())

    tgt_in = torch.cat([torch.full((1, 1), BOS), src[:1, :-1]], dim=1)
    a = decode_logits(src[:1], tgt_in, tgt_mask)
    tgt_in[0, -1] = (tgt_in[0, -1] + 1) % V
    b = decode_logits(src[:1], tgt_in, tgt_mask)
    print("position 0 moved when the last target token changed:", (a - b)[0, 0].abs().max().item())
