"""wav2vec2-like speech encoder: conv feature extractor, frame-level padding mask, SDPA layers.

The feature extractor returns a sample-level `attention_mask` (1 = real audio) as Hugging Face's
Wav2Vec2FeatureExtractor does; the encoder turns it into a frame-level mask through the conv
strides and keeps fairseq's name `padding_mask` (True = padded frame) for pooling.
Bug: the fairseq-style padding_mask (True = padding) is given to SDPA, where True means attend.
Source: conventions.md §1 direction cheat-sheet and the torch 2.13 SDPA docstring note ("invert your
boolean mask when migrating from MHA"); seed self_attention_mask_guide.txt §2 and Q1; rasbt/LLMs-from-scratch#1061.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def feature_extractor(waveforms):
    width = max(w.numel() for w in waveforms)
    input_values = torch.zeros(len(waveforms), width)
    attention_mask = torch.zeros(len(waveforms), width, dtype=torch.long)
    for i, w in enumerate(waveforms):
        input_values[i, : w.numel()] = (w - w.mean()) / (w.std() + 1e-7)
        attention_mask[i, : w.numel()] = 1
    return {"input_values": input_values, "attention_mask": attention_mask}


class SpeechEncoder(nn.Module):
    def __init__(self, dim=32, heads=4, layers=2, n_classes=5):
        super().__init__()
        self.heads = heads
        self.convs = nn.ModuleList([nn.Conv1d(1, dim, 10, stride=5), nn.Conv1d(dim, dim, 3, stride=2)])
        self.qkv = nn.ModuleList([nn.Linear(dim, 3 * dim) for _ in range(layers)])
        self.out = nn.ModuleList([nn.Linear(dim, dim) for _ in range(layers)])
        self.norm = nn.LayerNorm(dim)
        self.classifier = nn.Linear(dim, n_classes)

    def feat_lengths(self, lengths):
        for conv in self.convs:
            lengths = torch.div(lengths - conv.kernel_size[0], conv.stride[0], rounding_mode="floor") + 1
        return lengths

    def forward(self, input_values, attention_mask):
        x = input_values[:, None, :]
        for conv in self.convs:
            x = F.gelu(conv(x))
        x = x.transpose(1, 2)  # (B, T, dim)
        B, T, D = x.shape
        lengths = self.feat_lengths(attention_mask.sum(-1))
        padding_mask = torch.arange(T)[None, :] >= lengths[:, None]
        for qkv, out in zip(self.qkv, self.out):
            h = self.norm(x)
            q, k, v = qkv(h).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=padding_mask[:, None, None, :])  # expect: MC511 speech
            x = x + out(a.transpose(1, 2).reshape(B, T, D))
        keep = (~padding_mask).unsqueeze(-1).to(x.dtype)
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.classifier(pooled)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = SpeechEncoder()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    waves = [torch.sin(torch.arange(n) * 0.05 * (c + 1)) + 0.1 * torch.randn(n)
             for n, c in [(1600, 0), (1200, 1), (900, 2), (1600, 3)]]
    labels = torch.tensor([0, 1, 2, 3])
    for _ in range(20):
        loss = F.cross_entropy(model(**feature_extractor(waves)), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        alone = model(**feature_extractor(waves[2:3]))
        batched = model(**feature_extractor(waves))[2:3]
    print("loss", round(loss.item(), 4), "padded vs alone", (alone - batched).abs().max().item())
