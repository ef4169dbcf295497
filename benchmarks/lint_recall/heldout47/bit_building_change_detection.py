"""Earth-observation change detection of new buildings with the Bitemporal Image Transformer.

Imitates justchenhao/BIT_CD (Chen et al., TGRS 2021): `BASE_Transformer` with a shared
backbone `forward_single`, the semantic tokenizer `_forward_semantic_tokens` (`conv_a`
spatial attention softmaxed over the pixels of each of `token_len` tokens), the token
encoder `Transformer` and the pixel decoder `TransformerDecoder` from `help_funcs.py`
(`Residual` / `Residual2`, `PreNorm` / `PreNorm2`, `FeedForward`, `Attention`,
`Cross_Attention`), a learned `pos_embedding`, feature differencing, `upsamplex4`, the
`classifier`, and the trainer's `_update_metric` with F1 of the change class. A processor
returns `pixel_values` and a `pixel_mask` per date (1 = valid pixel), so that the no-data
wedges left by orthorectification do not feed the tokens.
Synthetic data: LEVIR-CD-like 32 x 32 pairs with textured ground, illumination changes that
are not change, new bright building footprints that are, and no-data corners in some scenes.

Source: conventions.md §1 (HF 2-D attention_mask row, direction cheat-sheet); seed
self_attention_mask_guide.txt §7 Q1; seed masked_fill_inplace.txt (作用).
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

NODATA = 0.0


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(x, **kwargs) + x


class Residual2(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x, x2, **kwargs):
        return self.fn(x, x2, **kwargs) + x


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class PreNorm2(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, x2, **kwargs):
        return self.fn(self.norm(x), self.norm(x2), **kwargs)


class FeedForward(nn.Module):
    def __init__(self, dim, hidden_dim, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, hidden_dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden_dim, dim), nn.Dropout(dropout))

    def forward(self, x):
        return self.net(x)


def split_heads(t, h):
    return t.reshape(t.shape[0], t.shape[1], h, -1).permute(0, 2, 1, 3)


def merge_heads(t):
    return t.permute(0, 2, 1, 3).flatten(2)


class Cross_Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64, dropout=0.0, softmax=True):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim ** -0.5
        self.softmax = softmax
        self.to_q = nn.Linear(dim, inner_dim, bias=False)
        self.to_k = nn.Linear(dim, inner_dim, bias=False)
        self.to_v = nn.Linear(dim, inner_dim, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x, m, mask=None):
        q = split_heads(self.to_q(x), self.heads)
        k = split_heads(self.to_k(m), self.heads)
        v = split_heads(self.to_v(m), self.heads)
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        attn = dots.softmax(dim=-1) if self.softmax else dots
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return self.to_out(merge_heads(out))


class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64, dropout=0.0):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x, mask=None):
        q, k, v = (split_heads(t, self.heads) for t in self.to_qkv(x).chunk(3, dim=-1))
        dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
        attn = dots.softmax(dim=-1)
        out = torch.einsum("bhij,bhjd->bhid", attn, v)
        return self.to_out(merge_heads(out))


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual(PreNorm(dim, Attention(dim, heads=heads, dim_head=dim_head, dropout=dropout))),
                Residual(PreNorm(dim, FeedForward(dim, mlp_dim, dropout=dropout))),
            ]))

    def forward(self, x, mask=None):
        for attn, ff in self.layers:
            x = attn(x, mask=mask)
            x = ff(x)
        return x


class TransformerDecoder(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout, softmax=True):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                Residual2(PreNorm2(dim, Cross_Attention(dim, heads=heads, dim_head=dim_head,
                                                        dropout=dropout, softmax=softmax))),
                Residual(PreNorm(dim, FeedForward(dim, mlp_dim, dropout=dropout))),
            ]))

    def forward(self, x, m, mask=None):
        for attn, ff in self.layers:
            x = attn(x, m, mask=mask)
            x = ff(x)
        return x


class BASE_Transformer(nn.Module):
    def __init__(self, input_nc=3, output_nc=2, token_len=4, enc_depth=1, dec_depth=1,
                 dim_head=8, decoder_dim_head=8, with_pos="learned"):
        super().__init__()
        dim = 32
        mlp_dim = 2 * dim
        self.token_len = token_len
        self.backbone = nn.Sequential(
            nn.Conv2d(input_nc, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, dim, 3, padding=1))
        self.conv_a = nn.Conv2d(dim, self.token_len, kernel_size=1, padding=0, bias=False)
        self.with_pos = with_pos
        self.pos_embedding = nn.Parameter(torch.randn(1, self.token_len * 2, dim))
        self.transformer = Transformer(dim=dim, depth=enc_depth, heads=4, dim_head=dim_head,
                                       mlp_dim=mlp_dim, dropout=0)
        self.transformer_decoder = TransformerDecoder(dim=dim, depth=dec_depth, heads=4,
                                                      dim_head=decoder_dim_head, mlp_dim=mlp_dim,
                                                      dropout=0, softmax=True)
        self.upsamplex4 = nn.Upsample(scale_factor=4, mode="bilinear", align_corners=False)
        self.classifier = nn.Sequential(nn.Conv2d(dim, 32, 3, padding=1), nn.BatchNorm2d(32),
                                        nn.ReLU(), nn.Conv2d(32, output_nc, 3, padding=1))

    def forward_single(self, x):
        return self.backbone(x)

    def _forward_semantic_tokens(self, x, pixel_mask):
        b, c, h, w = x.shape
        valid = F.adaptive_max_pool2d(pixel_mask[:, None].float(), (h, w)).flatten(1).bool()
        spatial_attention = self.conv_a(x)
        spatial_attention = spatial_attention.view([b, self.token_len, -1]).contiguous()
        spatial_attention = spatial_attention.masked_fill(valid[:, None, :], float("-inf"))  # expect: MC519 method
        spatial_attention = torch.softmax(spatial_attention, dim=-1)
        x = x.view([b, c, -1]).contiguous()
        return torch.einsum("bln,bcn->blc", spatial_attention, x)

    def _forward_transformer(self, x):
        if self.with_pos:
            x = x + self.pos_embedding
        return self.transformer(x)

    def _forward_transformer_decoder(self, x, m):
        b, c, h, w = x.shape
        x = x.flatten(2).transpose(1, 2)
        x = self.transformer_decoder(x, m)
        return x.transpose(1, 2).reshape(b, c, h, w)

    def forward(self, x1, x2, pixel_mask1, pixel_mask2):
        x1 = self.forward_single(x1)
        x2 = self.forward_single(x2)
        token1 = self._forward_semantic_tokens(x1, pixel_mask1)
        token2 = self._forward_semantic_tokens(x2, pixel_mask2)
        self.tokens_ = torch.cat([token1, token2], dim=1)
        self.tokens = self._forward_transformer(self.tokens_)
        token1, token2 = self.tokens.chunk(2, dim=1)
        x1 = self._forward_transformer_decoder(x1, token1)
        x2 = self._forward_transformer_decoder(x2, token2)
        x = torch.abs(x1 - x2)
        x = self.upsamplex4(x)
        return [self.classifier(x)]


class ChangeDetectionProcessor:
    def __init__(self, mean=0.5, std=0.25, nodata_value=NODATA):
        self.mean, self.std, self.nodata_value = mean, std, nodata_value

    def __call__(self, images_A, images_B):
        out = {}
        for key, images in (("A", images_A), ("B", images_B)):
            pixel_values = torch.from_numpy(np.stack(images)).float()
            out[f"pixel_mask_{key}"] = (pixel_values != self.nodata_value).any(dim=1).long()
            out[f"pixel_values_{key}"] = (pixel_values - self.mean) / self.std
        return out


def make_pair(rng):
    yy, xx = np.mgrid[0:32, 0:32]
    ground = 0.45 + 0.1 * np.sin(rng.uniform(0.2, 0.6) * xx + rng.uniform(0, 6)) * np.cos(rng.uniform(0.2, 0.6) * yy)
    img_a = np.stack([ground * s for s in (0.9, 1.0, 0.8)]) + rng.normal(0, 0.03, (3, 32, 32))
    img_b = img_a * rng.uniform(0.8, 1.2) + rng.normal(0, 0.03, (3, 32, 32))
    label = np.zeros((32, 32), dtype=np.int64)
    for _ in range(int(rng.integers(0, 4))):
        y0, x0 = rng.integers(0, 26, size=2)
        hh, ww = rng.integers(3, 7, size=2)
        img_b[:, y0:y0 + hh, x0:x0 + ww] = np.array([0.95, 0.9, 0.85])[:, None, None]
        label[y0:y0 + hh, x0:x0 + ww] = 1
    img_a, img_b = np.clip(img_a, 0.01, 1.0), np.clip(img_b, 0.01, 1.0)
    valid = np.ones((32, 32), dtype=bool)
    if rng.random() < 0.5:
        cut = int(rng.integers(8, 20))
        valid = (xx + yy) >= cut
        img_a[:, ~valid] = NODATA
        img_b[:, ~valid] = NODATA
    return img_a, img_b, label, valid


def _update_metric(pred, gt, valid, stats):
    pred, gt = pred[valid], gt[valid]
    stats["tp"] += ((pred == 1) & (gt == 1)).sum().item()
    stats["fp"] += ((pred == 1) & (gt == 0)).sum().item()
    stats["fn"] += ((pred == 0) & (gt == 1)).sum().item()


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    processor = ChangeDetectionProcessor()
    train = [make_pair(rng) for _ in range(256)]
    val = [make_pair(rng) for _ in range(64)]
    net_G = BASE_Transformer()
    optimizer_G = torch.optim.AdamW(net_G.parameters(), lr=2e-3, weight_decay=0.01)
    for epoch_id in range(6):
        net_G.train()
        order = rng.permutation(len(train))
        losses = []
        for start in range(0, len(order), 16):
            batch = [train[i] for i in order[start:start + 16]]
            inputs = processor([b[0] for b in batch], [b[1] for b in batch])
            gt = torch.from_numpy(np.stack([b[2] for b in batch]))
            valid = torch.from_numpy(np.stack([b[3] for b in batch]))
            G_pred = net_G(inputs["pixel_values_A"], inputs["pixel_values_B"],
                           inputs["pixel_mask_A"], inputs["pixel_mask_B"])[-1]
            G_loss = F.cross_entropy(G_pred, gt.masked_fill(~valid, -100), weight=torch.tensor([0.3, 0.7]),
                                     ignore_index=-100)
            optimizer_G.zero_grad()
            G_loss.backward()
            optimizer_G.step()
            losses.append(G_loss.item())
        net_G.eval()
        stats = {"tp": 0, "fp": 0, "fn": 0}
        with torch.no_grad():
            inputs = processor([b[0] for b in val], [b[1] for b in val])
            pred = net_G(inputs["pixel_values_A"], inputs["pixel_values_B"],
                         inputs["pixel_mask_A"], inputs["pixel_mask_B"])[-1].argmax(dim=1)
        _update_metric(pred, torch.from_numpy(np.stack([b[2] for b in val])),
                       torch.from_numpy(np.stack([b[3] for b in val])), stats)
        print(f"epoch {epoch_id} G_loss {np.mean(losses):.4f} val F1_1 "
              f"{2 * stats['tp'] / max(1, 2 * stats['tp'] + stats['fp'] + stats['fn']):.3f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
