"""Stage-delay prediction along static-timing paths of a placed netlist.

Each timing path from an OpenSTA-style report is a sequence of stages (cell
type, fanout, load capacitance, wire length, input slew). A causal
transformer reads the path from its start point and predicts every stage's
delay; arrival times are the running sum, compared with the clock period to
get the worst negative slack of a design.

Source: seed self_attention_mask_guide.txt (section 3, generate_causal_mask), pytorch/pytorch#103749
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

CELL_TYPES = ("INV_X1", "INV_X4", "BUF_X2", "NAND2_X1", "NOR2_X1", "AOI21_X1", "XOR2_X1", "DFF_X1")
CELL_DELAY_PS = torch.tensor([9.0, 6.0, 14.0, 12.0, 16.0, 18.0, 24.0, 35.0])
CLOCK_PERIOD_PS = 780.0


def path_causal_mask(n_stages, device=None):
    return torch.triu(torch.ones(n_stages, n_stages, dtype=torch.bool, device=device), diagonal=1)


def synth_paths(n_paths, max_stages=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    paths = []
    for _ in range(n_paths):
        n = int(torch.randint(6, max_stages + 1, (1,), generator=g))
        cells = torch.randint(len(CELL_TYPES) - 1, (n,), generator=g)
        cells[0] = len(CELL_TYPES) - 1
        fanout = torch.randint(1, 6, (n,), generator=g).float()
        load = 0.5 + 3.0 * torch.rand(n, generator=g)
        wire = 40.0 * torch.rand(n, generator=g)
        slew = torch.cat([torch.tensor([5.0]), 2.0 * load[:-1] + 0.05 * wire[:-1]])
        delay = CELL_DELAY_PS[cells] * (1 + 0.15 * fanout) + 2.5 * load + 0.1 * wire + 0.6 * slew
        feats = torch.stack([fanout / 5.0, load / 3.5, wire / 40.0, slew / 12.0], dim=-1)
        paths.append((cells, feats, delay))
    return paths


def collate_paths(paths):
    n = max(c.shape[0] for c, _, _ in paths)
    b = len(paths)
    cells = torch.zeros(b, n, dtype=torch.long)
    feats = torch.zeros(b, n, 4)
    delay = torch.zeros(b, n)
    stage_pad = torch.ones(b, n, dtype=torch.bool)
    for i, (c, f, d) in enumerate(paths):
        cells[i, : len(c)] = c
        feats[i, : len(c)] = f
        delay[i, : len(c)] = d
        stage_pad[i, : len(c)] = False
    return cells, feats, delay, stage_pad


class PathDelayTransformer(nn.Module):
    def __init__(self, d_model=64, n_heads=4, n_layers=3, max_stages=64):
        super().__init__()
        self.cell_embed = nn.Embedding(len(CELL_TYPES), d_model)
        self.feat_proj = nn.Linear(4, d_model)
        self.pos_embed = nn.Embedding(max_stages, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.delay_head = nn.Linear(d_model, 1)

    def forward(self, cells, feats, stage_pad):
        n = cells.shape[1]
        pos = torch.arange(n, device=cells.device)
        x = self.cell_embed(cells) + self.feat_proj(feats) + self.pos_embed(pos)
        x = self.encoder(x, mask=path_causal_mask(n, cells.device), src_key_padding_mask=stage_pad)
        delay = F.softplus(self.delay_head(x).squeeze(-1)) * 20.0
        return delay.masked_fill(stage_pad, 0.0)


def arrival_times(delay):
    return delay.cumsum(dim=-1)


@torch.no_grad()
def timing_report(model, batch):
    model.eval()
    cells, feats, delay, stage_pad = batch
    pred = arrival_times(model(cells, feats, stage_pad))
    true = arrival_times(delay)
    last = (~stage_pad).sum(-1) - 1
    pred_end = pred.gather(1, last[:, None]).squeeze(1)
    true_end = true.gather(1, last[:, None]).squeeze(1)
    mae = (pred_end - true_end).abs().mean().item()
    wns_pred = (CLOCK_PERIOD_PS - pred_end).min().item()
    wns_true = (CLOCK_PERIOD_PS - true_end).min().item()
    return mae, wns_pred, wns_true


def main():
    torch.manual_seed(0)
    train = synth_paths(512, seed=1)
    test = collate_paths(synth_paths(128, seed=2))
    model = PathDelayTransformer()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(6):
        model.train()
        perm = torch.randperm(len(train))
        for i in range(0, len(train), 32):
            cells, feats, delay, stage_pad = collate_paths([train[j] for j in perm[i : i + 32]])
            pred = model(cells, feats, stage_pad)
            loss = F.smooth_l1_loss(pred[~stage_pad], delay[~stage_pad])
            opt.zero_grad()
            loss.backward()
            opt.step()
        mae, wns_pred, wns_true = timing_report(model, test)
        print(f"epoch {epoch} loss {loss.item():.2f} endpoint MAE {mae:.1f} ps WNS {wns_pred:.1f} ps (true {wns_true:.1f})")


if __name__ == "__main__":
    main()
