"""Inverse-cooking-style recipe generation from food images and predicted ingredients.

Layout after facebookresearch/inversecooking (Salvador et al., "Inverse Cooking: Recipe
Generation from Food Images", CVPR 2019): `EncoderCNN` image tokens, `EncoderLabels` ingredient
embeddings, `mask_from_eos` and `label2onehot`, an ingredient predictor (here the feed-forward
multi-label variant), `DecoderTransformer` whose layers attend to the instruction prefix and to
the concatenated image and ingredient features, `InverseCookingModel.forward` with the ingredient
and instruction losses and `sample` by greedy decoding; synthetic dishes of 2-5 ingredients
whose images show one coloured patch per ingredient. Attention runs on F.scaled_dot_product_attention.

Source: conventions.md §1 (SDPA is_causal row), §2.7 and §5 item 8, pytorch/pytorch PR #111007 (conventions.md §1)
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

N_INGRS = 16
VERBS = ["chop", "add", "mix", "bake", "boil", "serve", "fry"]
INSTR_VOCAB = ["<pad>", "<start>", "<end>", "<eoi>"] + VERBS + [f"ingr{i}" for i in range(N_INGRS)]
W = {w: i for i, w in enumerate(INSTR_VOCAB)}
MAX_INGRS, MAX_LEN = 6, 26


def mask_from_eos(ids, eos_value, mult_before=True):
    mask = torch.ones(ids.size(), dtype=torch.uint8)
    mask_aux = torch.ones(ids.size(0), dtype=torch.uint8)
    for idx in range(ids.size(1)):
        if idx == 0:
            continue
        if mult_before:
            mask[:, idx] = mask[:, idx] * mask_aux
            mask_aux = mask_aux * (ids[:, idx] != eos_value)
        else:
            mask_aux = mask_aux * (ids[:, idx] != eos_value)
            mask[:, idx] = mask[:, idx] * mask_aux
    return mask


def label2onehot(labels, pad_value):
    one_hot = torch.zeros(labels.size(0), pad_value + 1).scatter_(1, labels, 1)
    return one_hot[:, 1:pad_value]


class EncoderCNN(nn.Module):
    def __init__(self, embed_size, dropout=0.3):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(32, embed_size, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout2d(dropout)

    def forward(self, images):
        return self.dropout(self.net(images)).flatten(2)


class EncoderLabels(nn.Module):
    def __init__(self, embed_size, num_classes, dropout=0.3):
        super().__init__()
        self.linear = nn.Embedding(num_classes, embed_size, padding_idx=num_classes - 1)
        self.dropout = dropout

    def forward(self, x):
        return F.dropout(self.linear(x), p=self.dropout, training=self.training).permute(0, 2, 1)


class TransformerDecoderLayer(nn.Module):
    def __init__(self, embed_dim, n_att, dropout=0.3, attention_dropout=0.1):
        super().__init__()
        self.n_att, self.dropout, self.attention_dropout = n_att, dropout, attention_dropout
        self.self_qkv = nn.Linear(embed_dim, 3 * embed_dim)
        self.self_out = nn.Linear(embed_dim, embed_dim)
        self.cond_q, self.cond_kv = nn.Linear(embed_dim, embed_dim), nn.Linear(embed_dim, 2 * embed_dim)
        self.cond_out = nn.Linear(embed_dim, embed_dim)
        self.fc1, self.fc2 = nn.Linear(embed_dim, embed_dim * 2), nn.Linear(embed_dim * 2, embed_dim)
        self.layer_norms = nn.ModuleList([nn.LayerNorm(embed_dim) for _ in range(3)])
        self.register_buffer("causal", torch.ones(MAX_LEN, MAX_LEN, dtype=torch.bool).tril())

    def heads(self, x):
        return x.view(x.size(0), x.size(1), self.n_att, -1).transpose(1, 2)

    def forward(self, x, ingr_img_features, ingr_img_mask, tgt_keep):
        B, T, E = x.shape
        p = self.attention_dropout if self.training else 0.0
        q, k, v = map(self.heads, self.self_qkv(self.layer_norms[0](x)).chunk(3, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=tgt_keep, dropout_p=p, is_causal=True)  # expect: MC506 positional
        x = x + F.dropout(self.self_out(y.transpose(1, 2).reshape(B, T, E)), p=self.dropout, training=self.training)
        q = self.heads(self.cond_q(self.layer_norms[1](x)))
        k, v = map(self.heads, self.cond_kv(ingr_img_features).chunk(2, dim=-1))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=ingr_img_mask, dropout_p=p)
        x = x + F.dropout(self.cond_out(y.transpose(1, 2).reshape(B, T, E)), p=self.dropout, training=self.training)
        h = self.fc2(F.relu(self.fc1(self.layer_norms[2](x))))
        return x + F.dropout(h, p=self.dropout, training=self.training)


class DecoderTransformer(nn.Module):
    def __init__(self, embed_size, vocab_size, dropout=0.3, seq_length=MAX_LEN, attention_nheads=4, num_layers=2):
        super().__init__()
        self.embed_scale = math.sqrt(embed_size)
        self.embed_tokens = nn.Embedding(vocab_size, embed_size, padding_idx=W["<pad>"])
        self.embed_positions = nn.Embedding(seq_length, embed_size)
        self.layers = nn.ModuleList([TransformerDecoderLayer(embed_size, attention_nheads, dropout) for _ in range(num_layers)])
        self.layer_norm = nn.LayerNorm(embed_size)
        self.linear = nn.Linear(embed_size, vocab_size)

    def forward(self, ingr_features, ingr_mask, captions, img_features):
        ingr_features = ingr_features.permute(0, 2, 1)
        ingr_mask = ingr_mask.squeeze(1)
        img_features = img_features.permute(0, 2, 1)
        img_mask = torch.ones(img_features.shape[:2], dtype=ingr_mask.dtype)
        features = torch.cat((img_features, ingr_features), 1)
        mask = torch.cat((img_mask, ingr_mask), 1)[:, None, None, :].bool()
        tgt_keep = (captions != W["<pad>"])[:, None, None, :]
        positions = torch.arange(captions.size(1)).unsqueeze(0)
        x = self.embed_scale * self.embed_tokens(captions) + self.embed_positions(positions)
        for layer in self.layers:
            x = layer(x, features, mask, tgt_keep)
        return self.linear(self.layer_norm(x))


class InverseCookingModel(nn.Module):
    def __init__(self, embed_size=64):
        super().__init__()
        self.pad_value = N_INGRS + 1
        self.image_encoder = EncoderCNN(embed_size)
        self.ingredient_encoder = EncoderLabels(embed_size, N_INGRS + 2)
        self.ingr_ff = nn.Sequential(nn.Flatten(), nn.Linear(embed_size * 16, embed_size), nn.ReLU(), nn.Linear(embed_size, N_INGRS))
        self.recipe_decoder = DecoderTransformer(embed_size, len(INSTR_VOCAB))

    def forward(self, img_inputs, captions, target_ingrs):
        img_features = self.image_encoder(img_inputs)
        ingr_logits = self.ingr_ff(img_features)
        target_one_hot = label2onehot(target_ingrs, self.pad_value)
        losses = {"ingr_loss": F.binary_cross_entropy_with_logits(ingr_logits, target_one_hot)}
        target_ingr_mask = mask_from_eos(target_ingrs, eos_value=0, mult_before=False).float().unsqueeze(1)
        outputs = self.recipe_decoder(self.ingredient_encoder(target_ingrs), target_ingr_mask, captions[:, :-1], img_features)
        losses["recipe_loss"] = F.cross_entropy(outputs.flatten(0, 1), captions[:, 1:].flatten(), ignore_index=W["<pad>"])
        return losses

    @torch.no_grad()
    def sample(self, img_inputs, threshold=0.5):
        img_features = self.image_encoder(img_inputs)
        probs = torch.sigmoid(self.ingr_ff(img_features))
        ingr_ids = torch.full((img_inputs.size(0), MAX_INGRS), self.pad_value)
        for b in range(img_inputs.size(0)):
            chosen = (torch.nonzero(probs[b] > threshold).flatten() + 1)[:MAX_INGRS - 1]
            ingr_ids[b, :len(chosen)], ingr_ids[b, len(chosen)] = chosen, 0
        ingr_mask = mask_from_eos(ingr_ids, eos_value=0, mult_before=False).float().unsqueeze(1)
        ingr_features = self.ingredient_encoder(ingr_ids)
        captions = torch.full((img_inputs.size(0), 1), W["<start>"])
        for _ in range(MAX_LEN - 1):
            logits = self.recipe_decoder(ingr_features, ingr_mask, captions, img_features)
            captions = torch.cat([captions, logits[:, -1:].argmax(-1)], 1)
        return probs > threshold, captions


def random_dish(rng, colours):
    ingrs = np.sort(rng.choice(N_INGRS, rng.integers(2, 6), replace=False))
    img = rng.normal(0, 0.1, (3, 16, 16)).astype(np.float32)
    for i in ingrs:
        y, x = (i // 4) * 4, (i % 4) * 4
        img[:, y:y + 4, x:x + 4] += colours[i][:, None, None]
    steps = [["chop" if i < 8 else "add", f"ingr{i}"] for i in ingrs]
    steps.append(["mix"])
    steps.append(["bake" if ingrs.max() >= 12 else ("fry" if ingrs.min() < 4 else "boil")])
    steps.append(["serve"])
    caption = ["<start>"] + [w for s in steps for w in s + ["<eoi>"]] + ["<end>"]
    return img, list(ingrs + 1), caption


def batchify(dishes, pad_value):
    imgs = torch.from_numpy(np.stack([d[0] for d in dishes]))
    ingrs = torch.full((len(dishes), MAX_INGRS), pad_value)
    caps = torch.full((len(dishes), MAX_LEN), W["<pad>"])
    for b, (_, ids, cap) in enumerate(dishes):
        ingrs[b, :len(ids)], ingrs[b, len(ids)] = torch.tensor(ids), 0
        caps[b, :len(cap)] = torch.tensor([W[w] for w in cap])
    return imgs, caps, ingrs


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    colours = rng.uniform(-1, 1, (N_INGRS, 3)).astype(np.float32)
    model = InverseCookingModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(300):
        model.train()
        imgs, caps, ingrs = batchify([random_dish(rng, colours) for _ in range(32)], model.pad_value)
        losses = model(imgs, caps, ingrs)
        loss = losses["ingr_loss"] + losses["recipe_loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 100 == 99:
            print(f"step {step + 1}: ingr {losses['ingr_loss'].item():.3f}, recipe {losses['recipe_loss'].item():.3f}")
    model.eval()
    imgs, caps, ingrs = batchify([random_dish(rng, colours) for _ in range(100)], model.pad_value)
    pred_ingrs, gen = model.sample(imgs)
    gold = label2onehot(ingrs, model.pad_value).bool()
    f1 = 2 * (pred_ingrs & gold).sum() / (pred_ingrs.sum() + gold.sum())
    real = caps != W["<pad>"]
    exact = ((gen == caps) | ~real).all(1).float().mean().item()
    print(f"ingredient F1 {f1.item():.3f}, recipe token accuracy {(gen == caps)[real].float().mean().item():.3f}, exact {exact:.3f}")
