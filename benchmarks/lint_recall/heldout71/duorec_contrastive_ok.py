"""DuoRec: contrastive learning for sequential recommendation (RecBole-style layout).

A unidirectional transformer encodes the left-aligned item sequence (padded with 0 at the
end), the representation at the last real position is the user's next-item query, and a
supervised contrastive term pulls together two dropout views of sequences that share the same
next item ("semantic augmentation"), with same-target pairs masked out of the negatives.

Source: pytorch/pytorch#29546 (conventions.md section 3 item 9); rasbt/LLMs-from-scratch#1061
(item 14); conventions.md section 1 (direction cheat-sheet).
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

config = {
    "n_layers": 2, "n_heads": 2, "hidden_size": 16, "inner_size": 32,
    "hidden_dropout_prob": 0.2, "attn_dropout_prob": 0.2, "layer_norm_eps": 1e-12,
    "MAX_ITEM_LIST_LENGTH": 8, "tau": 1.0, "lmd_sem": 0.1,
}


class MultiHeadAttention(nn.Module):
    def __init__(self, n_heads, hidden_size, attn_dropout_prob, hidden_dropout_prob, layer_norm_eps):
        super().__init__()
        self.num_attention_heads = n_heads
        self.attention_head_size = hidden_size // n_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.attn_dropout = nn.Dropout(attn_dropout_prob)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.out_dropout = nn.Dropout(hidden_dropout_prob)

    def transpose_for_scores(self, x):
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(*new_x_shape).permute(0, 2, 1, 3)

    def forward(self, input_tensor, attention_mask):
        query_layer = self.transpose_for_scores(self.query(input_tensor))
        key_layer = self.transpose_for_scores(self.key(input_tensor))
        value_layer = self.transpose_for_scores(self.value(input_tensor))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        attention_scores = attention_scores + attention_mask
        attention_probs = self.attn_dropout(nn.Softmax(dim=-1)(attention_scores))
        context_layer = torch.matmul(attention_probs, value_layer).permute(0, 2, 1, 3).contiguous()
        context_layer = context_layer.view(context_layer.size()[:-2] + (-1,))
        hidden_states = self.out_dropout(self.dense(context_layer))
        return self.LayerNorm(hidden_states + input_tensor)


class TransformerLayer(nn.Module):
    def __init__(self, n_heads, hidden_size, inner_size, hidden_dropout_prob, attn_dropout_prob, layer_norm_eps):
        super().__init__()
        self.multi_head_attention = MultiHeadAttention(n_heads, hidden_size, attn_dropout_prob,
                                                       hidden_dropout_prob, layer_norm_eps)
        self.ffn = nn.Sequential(nn.Linear(hidden_size, inner_size), nn.GELU(),
                                 nn.Linear(inner_size, hidden_size), nn.Dropout(hidden_dropout_prob))
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, hidden_states, attention_mask):
        h = self.multi_head_attention(hidden_states, attention_mask)
        return self.LayerNorm(self.ffn(h) + h)


class DuoRec(nn.Module):
    def __init__(self, config, n_items):
        super().__init__()
        self.n_items = n_items
        self.max_seq_length = config["MAX_ITEM_LIST_LENGTH"]
        self.hidden_size = config["hidden_size"]
        self.tau = config["tau"]
        self.lmd_sem = config["lmd_sem"]
        self.item_embedding = nn.Embedding(n_items, self.hidden_size, padding_idx=0)
        self.position_embedding = nn.Embedding(self.max_seq_length, self.hidden_size)
        layer = TransformerLayer(config["n_heads"], self.hidden_size, config["inner_size"],
                                 config["hidden_dropout_prob"], config["attn_dropout_prob"],
                                 config["layer_norm_eps"])
        self.layers = nn.ModuleList([copy.deepcopy(layer) for _ in range(config["n_layers"])])
        self.LayerNorm = nn.LayerNorm(self.hidden_size, eps=config["layer_norm_eps"])
        self.dropout = nn.Dropout(config["hidden_dropout_prob"])

    def get_attention_mask(self, item_seq):
        pad_keep = (item_seq > 0).unsqueeze(1).unsqueeze(2)
        max_len = item_seq.size(-1)
        causal_keep = torch.tril(torch.ones((max_len, max_len), dtype=torch.bool, device=item_seq.device))
        extended_attention_mask = pad_keep & causal_keep
        return torch.where(extended_attention_mask, 0.0, -10000.0)

    @staticmethod
    def gather_indexes(output, gather_index):
        gather_index = gather_index.view(-1, 1, 1).expand(-1, -1, output.shape[-1])
        return output.gather(dim=1, index=gather_index).squeeze(1)

    def forward(self, item_seq, item_seq_len):
        position_ids = torch.arange(item_seq.size(1), dtype=torch.long, device=item_seq.device)
        position_ids = position_ids.unsqueeze(0).expand_as(item_seq)
        input_emb = self.item_embedding(item_seq) + self.position_embedding(position_ids)
        hidden = self.dropout(self.LayerNorm(input_emb))
        extended_attention_mask = self.get_attention_mask(item_seq)
        for layer in self.layers:
            hidden = layer(hidden, extended_attention_mask)
        return self.gather_indexes(hidden, item_seq_len - 1)

    def info_nce(self, z_i, z_j, targets):
        n = z_i.size(0)
        z = torch.cat([z_i, z_j], dim=0)
        sim = torch.mm(z, z.T) / self.tau
        same = targets.repeat(2)
        positives = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
        neg_mask = same[:, None] == same[None, :]
        neg_mask[torch.arange(2 * n), positives] = False
        sim = sim.masked_fill(neg_mask, float("-inf"))
        return F.cross_entropy(sim, positives)

    def calculate_loss(self, interaction):
        item_seq, item_seq_len = interaction["item_id_list"], interaction["item_length"]
        seq_output = self.forward(item_seq, item_seq_len)
        logits = torch.matmul(seq_output, self.item_embedding.weight.transpose(0, 1))
        loss = F.cross_entropy(logits, interaction["item_id"])
        sem_output = self.forward(interaction["sem_aug"], interaction["sem_aug_lengths"])
        return loss + self.lmd_sem * self.info_nce(seq_output, sem_output, interaction["item_id"])

    @torch.no_grad()
    def full_sort_predict(self, item_seq, item_seq_len):
        seq_output = self.forward(item_seq, item_seq_len)
        return torch.matmul(seq_output, self.item_embedding.weight.transpose(0, 1))


def fake_interaction(batch_size, max_len, n_items, generator=None):
    def seqs():
        lens = torch.randint(1, max_len + 1, (batch_size,), generator=generator)
        ids = torch.randint(1, n_items, (batch_size, max_len), generator=generator)
        return ids * (torch.arange(max_len)[None, :] < lens[:, None]), lens
    item_seq, item_len = seqs()
    sem, sem_len = seqs()
    return {"item_id_list": item_seq, "item_length": item_len, "sem_aug": sem, "sem_aug_lengths": sem_len,
            "item_id": torch.randint(1, n_items, (batch_size,), generator=generator)}


if __name__ == "__main__":
    torch.manual_seed(2021)
    model = DuoRec(config, n_items=40)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    inter = fake_interaction(6, config["MAX_ITEM_LIST_LENGTH"], 40)
    for epoch in range(3):
        model.train()
        loss = model.calculate_loss(inter)
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    scores = model.full_sort_predict(inter["item_id_list"], inter["item_length"])
    print("loss %.4f  top-5 %s" % (loss.item(), scores[0].topk(5).indices.tolist()))
