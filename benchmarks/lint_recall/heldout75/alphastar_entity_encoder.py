"""AlphaStar-style entity encoder and selected-units head for a StarCraft II agent.

Observed units come as a list of entities (unit type, owner, health, position,
order flags); the list is padded to ``max_entities`` per observation.  A small
transformer encodes the entities, the mean of the real ones feeds the core,
and the selected-units head points at units one by one (with an end-of-selection
slot) until it picks the end slot, never picking a unit twice.

Source: pytorch/pytorch#103963 (conventions.md section 3 item 6); conventions.md
sections 2.9 and 5 item 7.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

MAX_ENTITIES = 10
MAX_SELECTED = 4
NUM_UNIT_TYPES = 32
ENTITY_FEATS = 14
D_MODEL = 64
N_HEADS = 2


def entity_padding(num_entities, max_entities=MAX_ENTITIES):
    return torch.arange(max_entities, device=num_entities.device)[None, :] >= num_entities[:, None]


class EntityAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x, pad):
        B, N, D = x.shape
        q, k, v = self.qkv(x).view(B, N, 3, self.n_heads, D // self.n_heads).unbind(2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(D // self.n_heads)
        scores = scores + pad[:, None, None, :]  # expect: MC509 padding
        weights = scores.softmax(dim=-1)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, N, D)
        return self.out(out)


class EntityEncoder(nn.Module):
    def __init__(self, n_layers=3):
        super().__init__()
        self.type_emb = nn.Embedding(NUM_UNIT_TYPES, D_MODEL)
        self.feat_proj = nn.Linear(ENTITY_FEATS, D_MODEL)
        self.attn = nn.ModuleList([EntityAttention(D_MODEL, N_HEADS) for _ in range(n_layers)])
        self.mlp = nn.ModuleList([nn.Sequential(nn.Linear(D_MODEL, 4 * D_MODEL), nn.ReLU(),
                                                nn.Linear(4 * D_MODEL, D_MODEL)) for _ in range(n_layers)])
        self.norms = nn.ModuleList([nn.LayerNorm(D_MODEL) for _ in range(2 * n_layers)])
        self.embed_out = nn.Linear(D_MODEL, D_MODEL)

    def forward(self, unit_types, features, num_entities):
        pad = entity_padding(num_entities, unit_types.size(1))
        x = self.type_emb(unit_types) + self.feat_proj(features)
        for i, (attn, mlp) in enumerate(zip(self.attn, self.mlp)):
            x = x + attn(self.norms[2 * i](x), pad)
            x = x + mlp(self.norms[2 * i + 1](x))
        entity_embeddings = F.relu(x)
        keep = (~pad).unsqueeze(-1).float()
        embedded_entity = (entity_embeddings * keep).sum(1) / keep.sum(1).clamp(min=1.0)
        return entity_embeddings, F.relu(self.embed_out(embedded_entity)), pad


class SelectedUnitsHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.key_proj = nn.Conv1d(D_MODEL, 32, kernel_size=1)
        self.end_key = nn.Parameter(torch.randn(1, 1, 32) * 0.02)
        self.query_lstm = nn.LSTMCell(32, 32)
        self.query_in = nn.Linear(D_MODEL, 32)

    def forward(self, autoregressive_embedding, entity_embeddings, pad, selectable):
        B = entity_embeddings.size(0)
        keys = self.key_proj(entity_embeddings.transpose(1, 2)).transpose(1, 2)
        keys = torch.cat([keys, self.end_key.expand(B, -1, -1)], dim=1)
        blocked = torch.cat([pad | ~selectable, torch.zeros(B, 1, dtype=torch.bool)], dim=1)
        blocked[:, -1] = True
        state = (torch.zeros(B, 32), torch.zeros(B, 32))
        x = self.query_in(autoregressive_embedding)
        all_logits, picks = [], []
        for step in range(MAX_SELECTED):
            state = self.query_lstm(x, state)
            logits = torch.einsum("bd,bnd->bn", state[0], keys)
            logits = logits.masked_fill(blocked, torch.finfo(logits.dtype).min)
            pick = logits.argmax(-1)
            all_logits.append(logits)
            picks.append(pick)
            blocked = blocked.scatter(1, pick[:, None], True)
            if step == 0:
                blocked[:, -1] = False
            x = x + keys.gather(1, pick[:, None, None].expand(-1, 1, keys.size(-1))).squeeze(1)
        return torch.stack(all_logits, 1), torch.stack(picks, 1)


def random_observation(batch_size):
    num_entities = torch.randint(3, MAX_ENTITIES + 1, (batch_size,))
    pad = entity_padding(num_entities)
    unit_types = torch.randint(1, NUM_UNIT_TYPES, (batch_size, MAX_ENTITIES)).masked_fill(pad, 0)
    features = torch.randn(batch_size, MAX_ENTITIES, ENTITY_FEATS).masked_fill(pad.unsqueeze(-1), 0.0)
    owned = (torch.rand(batch_size, MAX_ENTITIES) < 0.6) & ~pad
    owned[:, 0] = True
    return unit_types, features, num_entities, owned


if __name__ == "__main__":
    torch.manual_seed(0)
    encoder, head = EntityEncoder(), SelectedUnitsHead()
    unit_types, features, num_entities, owned = random_observation(4)
    entity_embeddings, embedded_entity, pad = encoder(unit_types, features, num_entities)
    logits, picks = head(embedded_entity, entity_embeddings, pad, owned)
    is_end = picks == MAX_ENTITIES
    before_end = (is_end.cumsum(1) - is_end.long()) == 0
    logp = F.log_softmax(logits, dim=-1).gather(-1, picks.unsqueeze(-1)).squeeze(-1)
    advantage = torch.randn(4, 1)
    loss = -(logp * advantage * before_end).sum() / before_end.sum()
    loss.backward()
    print("picks", picks.tolist(), "loss", round(loss.item(), 4))
