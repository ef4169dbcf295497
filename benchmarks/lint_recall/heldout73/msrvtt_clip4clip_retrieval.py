"""Text-to-video retrieval on MSR-VTT-style clips, CLIP4Clip layout.

Frame features from a CLIP image tower go through a seqTransf temporal
transformer; the video embedding is pooled per text query over the frames
(X-Pool style) and scored against the EOT embedding of the caption.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md §3 item 20); conventions.md §1 (cheat-sheet, values used in the wild), §2.3.
"""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

task_config = SimpleNamespace(max_words=12, max_frames=6, hidden=32, heads=4, temporal_layers=2, vocab=400, pool_temp=0.05)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_head)
        self.ln_1 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, d_model * 4), nn.GELU(), nn.Linear(d_model * 4, d_model))
        self.ln_2 = nn.LayerNorm(d_model)
        self.n_head = n_head

    def attention(self, x, attn_mask):
        attn_mask_ = attn_mask.repeat_interleave(self.n_head, dim=0)
        return self.attn(x, x, x, need_weights=False, attn_mask=attn_mask_)[0]

    def forward(self, para_tuple):
        x, attn_mask = para_tuple
        x = x + self.attention(self.ln_1(x), attn_mask)
        x = x + self.mlp(self.ln_2(x))
        return (x, attn_mask)


class TransformerClip(nn.Module):
    def __init__(self, width, layers, heads):
        super().__init__()
        self.resblocks = nn.Sequential(*[ResidualAttentionBlock(width, heads) for _ in range(layers)])

    def forward(self, x, attn_mask):
        return self.resblocks((x, attn_mask))[0]


class TextEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.token_embedding = nn.Embedding(cfg.vocab, cfg.hidden)
        self.positional_embedding = nn.Parameter(torch.randn(cfg.max_words, cfg.hidden) * 0.01)
        self.transformer = TransformerClip(cfg.hidden, 2, cfg.heads)
        self.ln_final = nn.LayerNorm(cfg.hidden)
        self.text_projection = nn.Linear(cfg.hidden, cfg.hidden, bias=False)
        causal = torch.full((cfg.max_words, cfg.max_words), float("-inf")).triu(1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, input_ids):
        b, n = input_ids.shape
        x = self.token_embedding(input_ids) + self.positional_embedding[:n]
        attn_mask = self.causal[:n, :n].expand(b, -1, -1)
        x = self.transformer(x.permute(1, 0, 2), attn_mask).permute(1, 0, 2)
        x = self.ln_final(x)
        return self.text_projection(x[torch.arange(b), input_ids.argmax(dim=-1)])


class CLIP4Clip(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.frame_encoder = nn.Sequential(nn.Conv2d(3, 16, 4, 4), nn.GELU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, cfg.hidden))
        self.text_encoder = TextEncoder(cfg)
        self.frame_position_embeddings = nn.Embedding(cfg.max_frames, cfg.hidden)
        self.transformerClip = TransformerClip(cfg.hidden, cfg.temporal_layers, cfg.heads)
        self.pool_q = nn.Linear(cfg.hidden, cfg.hidden)
        self.pool_k = nn.Linear(cfg.hidden, cfg.hidden)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def get_visual_output(self, video, video_mask):
        b, t = video_mask.shape
        visual_output = self.frame_encoder(video.flatten(0, 1)).view(b, t, -1)
        visual_output_original = visual_output
        position_ids = torch.arange(t, dtype=torch.long, device=video.device).unsqueeze(0).expand(b, -1)
        visual_output = visual_output + self.frame_position_embeddings(position_ids)
        extended_video_mask = (1.0 - video_mask.unsqueeze(1)) * -1000000.0
        extended_video_mask = extended_video_mask.expand(-1, video_mask.size(1), -1)
        visual_output = visual_output.permute(1, 0, 2)
        visual_output = self.transformerClip(visual_output, extended_video_mask)
        visual_output = visual_output.permute(1, 0, 2)
        return visual_output + visual_output_original

    def _mean_pooling_for_similarity_visual(self, visual_output, video_mask):
        video_mask_un = video_mask.to(dtype=torch.float).unsqueeze(-1)
        visual_output = visual_output * video_mask_un
        video_mask_un_sum = torch.sum(video_mask_un, dim=1, dtype=torch.float)
        video_mask_un_sum[video_mask_un_sum == 0.0] = 1.0
        return torch.sum(visual_output, dim=1) / video_mask_un_sum

    def text_conditioned_pool(self, sequence_output, visual_output, video_mask):
        q = self.pool_q(sequence_output)
        k = self.pool_k(visual_output)
        logits = torch.einsum("ad,vtd->avt", q, k) / self.cfg.pool_temp
        logits = logits.masked_fill(video_mask[None, :, :] == 0, -1e-9)  # expect: MC516 weak
        weights = logits.softmax(dim=-1)
        return torch.einsum("avt,vtd->avd", weights, visual_output)

    def get_similarity_logits(self, sequence_output, visual_output, video_mask):
        sequence_output = F.normalize(sequence_output, dim=-1)
        pooled = F.normalize(self.text_conditioned_pool(sequence_output, visual_output, video_mask), dim=-1)
        mean_video = F.normalize(self._mean_pooling_for_similarity_visual(visual_output, video_mask), dim=-1)
        scale = self.logit_scale.exp()
        pooled_logits = scale * torch.einsum("ad,avd->av", sequence_output, pooled)
        mean_logits = scale * sequence_output @ mean_video.t()
        return (pooled_logits + mean_logits) / 2

    def forward(self, input_ids, video, video_mask):
        sequence_output = self.text_encoder(input_ids)
        visual_output = self.get_visual_output(video, video_mask)
        return self.get_similarity_logits(sequence_output, visual_output, video_mask)


class CrossEn(nn.Module):
    def forward(self, sim_matrix):
        logpt = F.log_softmax(sim_matrix, dim=-1)
        return -torch.diag(logpt).mean()


def sample_frames(clips, max_frames):
    b = len(clips)
    video = torch.zeros(b, max_frames, 3, 16, 16)
    video_mask = torch.zeros(b, max_frames, dtype=torch.long)
    for i, clip in enumerate(clips):
        idx = torch.linspace(0, clip.shape[0] - 1, steps=min(max_frames, clip.shape[0])).long()
        video[i, : len(idx)] = clip[idx]
        video_mask[i, : len(idx)] = 1
    return video, video_mask


def encode_captions(captions, max_words):
    ids = torch.zeros(len(captions), max_words, dtype=torch.long)
    for i, cap in enumerate(captions):
        toks = [1] + [3 + sum(map(ord, w)) % 390 for w in cap.split()][: max_words - 2] + [399]
        ids[i, : len(toks)] = torch.tensor(toks)
    return ids


if __name__ == "__main__":
    torch.manual_seed(0)
    clips = [torch.randn(9, 3, 16, 16), torch.randn(3, 3, 16, 16), torch.randn(5, 3, 16, 16)]
    captions = ["a man is cooking pasta", "a cartoon cat jumps", "people dance on a stage"]
    video, video_mask = sample_frames(clips, task_config.max_frames)
    input_ids = encode_captions(captions, task_config.max_words)
    model = CLIP4Clip(task_config)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fct = CrossEn()
    for step in range(2):
        sim_matrix = model(input_ids, video, video_mask)
        loss = (loss_fct(sim_matrix) + loss_fct(sim_matrix.t())) / 2
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        ranks = model(input_ids, video, video_mask).argsort(dim=-1, descending=True)
    print("t2v R@1", (ranks[:, 0] == torch.arange(len(captions))).float().mean().item())
