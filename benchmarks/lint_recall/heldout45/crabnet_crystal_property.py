"""Compositionally restricted attention (CrabNet) for formation-energy regression.

Layout after anthony-wang/CrabNet (Wang, Kauwe, Murdock, Sparks, npj Comput. Mater. 7, 77, 2021):
`Embedder`, `FractionalEncoder`, `Encoder` over the elements of a formula, `ResidualNetwork`
output head with the uncertainty logits and the masked average over elements, trained on
synthetic binary to quinary compounds.

Source: conventions.md §2.6, §1 (nn.MultiheadAttention row) and §5 item 6
"""

import argparse

import numpy as np
import torch
import torch.nn as nn

N_ELEM = 32


class ResidualNetwork(nn.Module):
    def __init__(self, input_dim, output_dim, hidden_layer_dims):
        super().__init__()
        dims = [input_dim] + hidden_layer_dims
        self.fcs = nn.ModuleList([nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1)])
        self.res_fcs = nn.ModuleList([nn.Linear(dims[i], dims[i + 1], bias=False)
                                      if dims[i] != dims[i + 1] else nn.Identity()
                                      for i in range(len(dims) - 1)])
        self.acts = nn.ModuleList([nn.LeakyReLU() for _ in range(len(dims) - 1)])
        self.fc_out = nn.Linear(dims[-1], output_dim)

    def forward(self, fea):
        for fc, res_fc, act in zip(self.fcs, self.res_fcs, self.acts):
            fea = act(fc(fea)) + res_fc(fea)
        return self.fc_out(fea)


class Embedder(nn.Module):
    def __init__(self, d_model, elem_dim=16, seed=7):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        cbfv = torch.randn(N_ELEM, elem_dim, generator=g)
        cbfv[0] = 0.0
        self.cbfv = nn.Embedding.from_pretrained(cbfv, freeze=True)
        self.fc_mat2vec = nn.Linear(elem_dim, d_model)

    def forward(self, src):
        return self.fc_mat2vec(self.cbfv(src))


class FractionalEncoder(nn.Module):
    def __init__(self, d_model, resolution=100, log10=False):
        super().__init__()
        self.d_model = d_model // 2
        self.resolution = resolution
        self.log10 = log10
        x = torch.linspace(0, resolution - 1, resolution).view(resolution, 1)
        fraction = torch.linspace(0, self.d_model - 1, self.d_model).view(1, self.d_model).repeat(resolution, 1)
        pe = torch.zeros(resolution, self.d_model)
        pe[:, 0::2] = torch.sin(x / torch.pow(50, 2 * fraction[:, 0::2] / self.d_model))
        pe[:, 1::2] = torch.cos(x / torch.pow(50, 2 * fraction[:, 1::2] / self.d_model))
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x.clone()
        if self.log10:
            x = 0.0025 * (torch.log2(x.clamp(min=1e-8))) ** 2
            x = x.clamp(max=1)
        x = x.clamp(min=1 / self.resolution)
        frac_idx = torch.round(x * self.resolution).to(torch.long) - 1
        return self.pe[frac_idx]


def composition_masks(src, frac):
    mask = frac.unsqueeze(dim=-1)
    mask = torch.matmul(mask, mask.transpose(-2, -1))
    hmask = (mask[:, :, 0:1] != 0).to(frac.dtype)
    src_mask = src.eq(0)
    return hmask, src_mask


class Encoder(nn.Module):
    def __init__(self, d_model, N, heads, frac=False):
        super().__init__()
        self.d_model = d_model
        self.fractional = frac
        self.embed = Embedder(d_model=self.d_model)
        self.pe = FractionalEncoder(self.d_model, resolution=100, log10=False)
        self.ple = FractionalEncoder(self.d_model, resolution=100, log10=True)
        self.emb_scaler = nn.Parameter(torch.tensor([1.0]))
        self.pos_scaler = nn.Parameter(torch.tensor([1.0]))
        self.pos_scaler_log = nn.Parameter(torch.tensor([1.0]))
        encoder_layer = nn.TransformerEncoderLayer(self.d_model, nhead=heads, dim_feedforward=2 * d_model,
                                                   dropout=0.1)
        self.transformer_encoder = nn.TransformerEncoder(encoder_layer, num_layers=N, enable_nested_tensor=False)

    def forward(self, src, frac):
        x = self.embed(src) * 2 ** self.emb_scaler
        hmask, src_mask = composition_masks(src, frac)
        pe = torch.zeros_like(x)
        ple = torch.zeros_like(x)
        pe_scaler = 2 ** (1 - self.pos_scaler) ** 2
        ple_scaler = 2 ** (1 - self.pos_scaler_log) ** 2
        pe[:, :, :self.d_model // 2] = self.pe(frac) * pe_scaler
        ple[:, :, self.d_model // 2:] = self.ple(frac) * ple_scaler
        x_src = (x + pe + ple).transpose(0, 1)
        x = self.transformer_encoder(x_src, mask=src_mask)  # expect: MC515 tuple
        x = x.transpose(0, 1)
        if self.fractional:
            x = x * frac.unsqueeze(2).repeat(1, 1, self.d_model)
        return x * hmask


class CrabNet(nn.Module):
    def __init__(self, out_dims=2, d_model=64, N=2, heads=4):
        super().__init__()
        self.avg = True
        self.out_dims = out_dims
        self.encoder = Encoder(d_model=d_model, N=N, heads=heads)
        self.output_nn = ResidualNetwork(d_model, out_dims, [64, 32])

    def forward(self, src, frac):
        output = self.encoder(src, frac)
        mask = (src == 0).unsqueeze(-1).repeat(1, 1, self.out_dims)
        output = self.output_nn(output)
        output = output.masked_fill(mask, 0)
        output = output.sum(dim=1) / (~mask).sum(dim=1)
        output, logits = output.chunk(2, dim=-1)
        probability = torch.sigmoid(logits)
        return (output * probability).squeeze(-1), logits.squeeze(-1)


def make_compounds(n, max_elems, rng):
    props = rng.normal(size=(N_ELEM, 3))
    src = np.zeros((n, max_elems), dtype=np.int64)
    frac = np.zeros((n, max_elems), dtype=np.float32)
    y = np.zeros(n, dtype=np.float32)
    for i in range(n):
        k = rng.integers(2, max_elems + 1)
        elems = rng.choice(np.arange(1, N_ELEM), size=k, replace=False)
        amounts = rng.integers(1, 6, size=k).astype(np.float32)
        f = amounts / amounts.sum()
        src[i, :k] = elems
        frac[i, :k] = f
        mix = (f[:, None] * props[elems]).sum(0)
        spread = (f * (props[elems, 0] - mix[0]) ** 2).sum()
        y[i] = mix[0] - 0.5 * mix[1] * mix[2] - 1.5 * spread
    return torch.from_numpy(src), torch.from_numpy(frac), torch.from_numpy(y)


def evaluate(model, src, frac, y, batch_size):
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(y), batch_size):
            preds.append(model(src[i:i + batch_size], frac[i:i + batch_size])[0])
    return (torch.cat(preds) - y).abs().mean().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max_elems", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    src, frac, y = make_compounds(1600, args.max_elems, rng)
    y_mean, y_std = y[:1280].mean(), y[:1280].std()
    y = (y - y_mean) / y_std
    tr, te = slice(0, 1280), slice(1280, None)
    model = CrabNet()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    print(f"test MAE before training {evaluate(model, src[te], frac[te], y[te], args.batch_size):.3f}")
    for epoch in range(args.epochs):
        model.train()
        perm = torch.randperm(1280)
        total = 0.0
        for i in range(0, 1280, args.batch_size):
            idx = perm[i:i + args.batch_size]
            pred, logits = model(src[tr][idx], frac[tr][idx])
            loss = nn.functional.l1_loss(pred, y[tr][idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        if epoch % 4 == 3 or epoch == args.epochs - 1:
            mae = evaluate(model, src[te], frac[te], y[te], args.batch_size)
            print(f"epoch {epoch + 1}: train L1 {total / 1280:.3f}, test MAE {mae:.3f}")
    model.eval()
    with torch.no_grad():
        k = int((src[te][0] != 0).sum())
        alone = model(src[te][:1, :k], frac[te][:1, :k])[0]
        padded = model(src[te][:1], frac[te][:1])[0]
    print(f"first test compound alone vs padded: {abs(alone - padded).item():.1e}")
    print(f"(normalised units: 1 = {y_std.item():.3f} eV/atom)")


if __name__ == "__main__":
    main()
