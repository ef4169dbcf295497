"""VIMA-style policy for tabletop rearrangement from multimodal prompts.

A prompt mixes words with the objects of reference images ("put the {dragged
obj} into the {base obj}"); it is encoded once.  The trajectory is laid out
step by step: each step holds the previous action and the object tokens of the
current top-down view, and the step's first token reads out the next pick and
place as discretised poses.  Scenes hold different numbers of objects and
episodes have different lengths.

Source: seed self_attention_mask_guide.txt section 6 (create_block_mask);
conventions.md section 2.3.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {
    "embed_dim": 48,
    "n_heads": 4,
    "n_layers": 2,
    "vocab_size": 100,
    "obj_feat_dim": 12,
    "max_objects": 4,
    "pose_bins": (25, 25, 12),
}


def step_block_bias(n_steps, tokens_per_step):
    n = n_steps * tokens_per_step
    mask = torch.zeros(n, n)
    for t in range(n_steps):
        start, end = t * tokens_per_step, (t + 1) * tokens_per_step
        mask[start:end, :end] = 0  # expect: MC504 blocks
    mask[mask == 0] = float("-inf")  # also: MC504 blocks
    mask[mask == 1] = 0.0
    return mask


class PromptEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["embed_dim"]
        self.word_emb = nn.Embedding(cfg["vocab_size"], d)
        self.obj_proj = nn.Linear(cfg["obj_feat_dim"], d)
        layer = nn.TransformerEncoderLayer(d, cfg["n_heads"], 2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)

    def forward(self, words, word_mask, prompt_objs, prompt_obj_mask):
        tokens = torch.cat([self.word_emb(words), self.obj_proj(prompt_objs)], dim=1)
        prompt_mask = torch.cat([word_mask, prompt_obj_mask], dim=1)
        return self.encoder(tokens, src_key_padding_mask=~prompt_mask), prompt_mask


class XAttnLayer(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.xattn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, attn_bias, prompt, prompt_mask):
        B, N, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, N, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        h = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_bias)
        x = x + self.out(h.transpose(1, 2).reshape(B, N, D))
        h, _ = self.xattn(self.ln2(x), prompt, prompt, key_padding_mask=~prompt_mask, need_weights=False)
        x = x + h
        return x + self.mlp(self.ln3(x))


class VIMAPolicy(nn.Module):
    def __init__(self, cfg=CONFIG):
        super().__init__()
        d = cfg["embed_dim"]
        self.cfg = cfg
        self.tokens_per_step = 1 + cfg["max_objects"]
        self.prompt_encoder = PromptEncoder(cfg)
        self.obj_proj = nn.Linear(cfg["obj_feat_dim"], d)
        self.action_emb = nn.Linear(2 * len(cfg["pose_bins"]), d)
        self.step_emb = nn.Embedding(32, d)
        self.layers = nn.ModuleList([XAttnLayer(d, cfg["n_heads"]) for _ in range(cfg["n_layers"])])
        self.heads = nn.ModuleList([nn.Linear(d, 2 * n) for n in cfg["pose_bins"]])

    def forward(self, batch):
        prompt, prompt_mask = self.prompt_encoder(batch["words"], batch["word_mask"],
                                                  batch["prompt_objs"], batch["prompt_obj_mask"])
        B, T, M, _ = batch["obs_objs"].shape
        obj_tokens = self.obj_proj(batch["obs_objs"])
        act_tokens = self.action_emb(batch["prev_actions"]).unsqueeze(2)
        steps = torch.cat([act_tokens, obj_tokens], dim=2) + self.step_emb(torch.arange(T))[None, :, None]
        x = steps.reshape(B, T * self.tokens_per_step, -1)
        step_valid = batch["traj_mask"]
        token_keep = torch.cat([step_valid.unsqueeze(-1), batch["obs_obj_mask"] & step_valid.unsqueeze(-1)], dim=-1)
        token_keep = token_keep.reshape(B, T * self.tokens_per_step)
        bias = step_block_bias(T, self.tokens_per_step).to(x.dtype)
        attn_bias = bias[None, None].masked_fill(~token_keep[:, None, None, :], float("-inf"))
        for layer in self.layers:
            x = layer(x, attn_bias, prompt, prompt_mask)
        readout = x.view(B, T, self.tokens_per_step, -1)[:, :, 0]
        return [head(readout).unflatten(-1, (2, -1)) for head in self.heads]


def action_loss(logits_per_dim, target_bins, traj_mask):
    losses = []
    for logits, target in zip(logits_per_dim, target_bins.unbind(-1)):
        ce = F.cross_entropy(logits.flatten(0, 2), target.flatten(), reduction="none").view(target.shape)
        losses.append((ce * traj_mask.unsqueeze(-1)).sum() / traj_mask.sum().clamp(min=1) / 2)
    return sum(losses)


def make_batch(cfg, B=3, T=4, n_words=6, n_prompt_objs=3):
    word_mask = torch.arange(n_words)[None] < torch.tensor([6, 4, 5])[:, None]
    prompt_obj_mask = torch.arange(n_prompt_objs)[None] < torch.tensor([2, 3, 1])[:, None]
    traj_mask = torch.arange(T)[None] < torch.tensor([4, 2, 3])[:, None]
    obs_obj_mask = torch.rand(B, T, cfg["max_objects"]) < 0.7
    obs_obj_mask[..., 0] = True
    n_dims = len(cfg["pose_bins"])
    targets = torch.stack([torch.randint(n, (B, T, 2)) for n in cfg["pose_bins"]], dim=-1)
    prev = torch.zeros(B, T, 2, n_dims)
    prev[:, 1:] = targets[:, :-1].float() / torch.tensor(cfg["pose_bins"], dtype=torch.float)
    return {
        "words": torch.randint(cfg["vocab_size"], (B, n_words)).masked_fill(~word_mask, 0),
        "word_mask": word_mask,
        "prompt_objs": torch.randn(B, n_prompt_objs, cfg["obj_feat_dim"]),
        "prompt_obj_mask": prompt_obj_mask,
        "obs_objs": torch.randn(B, T, cfg["max_objects"], cfg["obj_feat_dim"]),
        "obs_obj_mask": obs_obj_mask,
        "prev_actions": prev.flatten(-2),
        "traj_mask": traj_mask,
    }, targets


if __name__ == "__main__":
    torch.manual_seed(0)
    policy = VIMAPolicy()
    batch, targets = make_batch(CONFIG)
    logits = policy(batch)
    loss = action_loss(logits, targets, batch["traj_mask"].float())
    loss.backward()
    print("imitation loss", round(loss.item(), 4))
