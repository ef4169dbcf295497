"""Deep Interest Network (DIN) for click-through-rate prediction.

Written in the DeepCTR-Torch layout: a local activation unit scores every behaviour against
the candidate ad, ``AttentionSequencePoolingLayer`` pools the behaviour sequence with the
normalised weights, and a Dice-activated MLP predicts the click. Behaviour sequences are padded
with item id 0 on the right; the keys' lengths come in as ``keys_length``.

Source: TransformerLensOrg/TransformerLens PR #366 (conventions.md section 3 item 20);
conventions.md section 2.3 (masked_fill with large negatives).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Dice(nn.Module):
    def __init__(self, emb_size, dim=2, epsilon=1e-8):
        super().__init__()
        self.bn = nn.BatchNorm1d(emb_size, eps=epsilon)
        self.sigmoid = nn.Sigmoid()
        self.dim = dim
        self.alpha = nn.Parameter(torch.zeros((emb_size,)) if dim == 2 else torch.zeros((emb_size, 1)))

    def forward(self, x):
        if self.dim == 2:
            x_p = self.sigmoid(self.bn(x))
            return self.alpha * (1 - x_p) * x + x_p * x
        x = torch.transpose(x, 1, 2)
        x_p = self.sigmoid(self.bn(x))
        out = self.alpha * (1 - x_p) * x + x_p * x
        return torch.transpose(out, 1, 2)


class LocalActivationUnit(nn.Module):
    def __init__(self, hidden_units=(64, 32), embedding_dim=4, dropout_rate=0.0):
        super().__init__()
        layers = []
        in_dim = 4 * embedding_dim
        for h in hidden_units:
            layers += [nn.Linear(in_dim, h), nn.PReLU(), nn.Dropout(dropout_rate)]
            in_dim = h
        self.dnn = nn.Sequential(*layers)
        self.dense = nn.Linear(in_dim, 1)

    def forward(self, query, user_behavior):
        user_behavior_len = user_behavior.size(1)
        queries = query.expand(-1, user_behavior_len, -1)
        attention_input = torch.cat([queries, user_behavior, queries - user_behavior,
                                     queries * user_behavior], dim=-1)
        attention_output = self.dnn(attention_input)
        return self.dense(attention_output)


class AttentionSequencePoolingLayer(nn.Module):
    def __init__(self, att_hidden_units=(80, 40), embedding_dim=4, weight_normalization=False,
                 return_score=False, supports_masking=False):
        super().__init__()
        self.return_score = return_score
        self.weight_normalization = weight_normalization
        self.supports_masking = supports_masking
        self.local_att = LocalActivationUnit(hidden_units=att_hidden_units, embedding_dim=embedding_dim)

    def forward(self, query, keys, keys_length, mask=None):
        batch_size, max_length, _ = keys.size()
        if self.supports_masking:
            if mask is None:
                raise ValueError("When supports_masking=True, input must support masking")
            keys_masks = mask.unsqueeze(1)
        else:
            keys_masks = torch.arange(max_length, device=keys_length.device).repeat(batch_size, 1)
            keys_masks = keys_masks < keys_length.view(-1, 1)
            keys_masks = keys_masks.unsqueeze(1)

        attention_score = self.local_att(query, keys)
        outputs = torch.transpose(attention_score, 1, 2)

        if self.weight_normalization:
            outputs = outputs.masked_fill(keys_masks == 0, -2 ** 32 + 1)
            outputs = F.softmax(outputs, dim=-1)
        else:
            outputs = torch.where(keys_masks, outputs, torch.zeros_like(outputs))

        if not self.return_score:
            outputs = torch.matmul(outputs, keys)
        return outputs


class DIN(nn.Module):
    def __init__(self, n_items, n_cates, n_users, embedding_dim=8, dnn_hidden_units=(64, 32),
                 att_hidden_size=(32, 16), att_weight_normalization=True):
        super().__init__()
        self.item_emb = nn.Embedding(n_items, embedding_dim, padding_idx=0)
        self.cate_emb = nn.Embedding(n_cates, embedding_dim, padding_idx=0)
        self.user_emb = nn.Embedding(n_users, embedding_dim)
        att_emb_dim = 2 * embedding_dim
        self.attention = AttentionSequencePoolingLayer(att_hidden_units=att_hidden_size,
                                                       embedding_dim=att_emb_dim,
                                                       weight_normalization=att_weight_normalization,
                                                       supports_masking=False)
        dnn_in = embedding_dim + 2 * att_emb_dim
        layers = []
        for h in dnn_hidden_units:
            layers += [nn.Linear(dnn_in, h), Dice(h)]
            dnn_in = h
        self.dnn = nn.Sequential(*layers)
        self.dnn_linear = nn.Linear(dnn_in, 1, bias=False)

    def embed(self, item_ids, cate_ids):
        return torch.cat([self.item_emb(item_ids), self.cate_emb(cate_ids)], dim=-1)

    def forward(self, X):
        query_emb = self.embed(X["item_id"], X["cate_id"]).unsqueeze(1)
        keys_emb = self.embed(X["hist_item_id"], X["hist_cate_id"])
        keys_length = (X["hist_item_id"] != 0).sum(dim=1)
        hist = self.attention(query_emb, keys_emb, keys_length)
        deep_input = torch.cat([self.user_emb(X["user"]), query_emb.squeeze(1), hist.squeeze(1)], dim=-1)
        dnn_output = self.dnn(deep_input)
        return torch.sigmoid(self.dnn_linear(dnn_output)).squeeze(-1)


def get_xy_fd(batch_size=6, hist_len=5, n_items=30, n_cates=6, n_users=4):
    lengths = torch.randint(1, hist_len + 1, (batch_size,))
    lengths[0] = 1
    hist_item = torch.randint(1, n_items, (batch_size, hist_len))
    hist_item = torch.where(torch.arange(hist_len)[None, :] < lengths[:, None], hist_item, 0)
    hist_cate = torch.where(hist_item > 0, hist_item % (n_cates - 1) + 1, 0)
    item = torch.randint(1, n_items, (batch_size,))
    feature_dict = {
        "user": torch.randint(0, n_users, (batch_size,)),
        "item_id": item,
        "cate_id": item % (n_cates - 1) + 1,
        "hist_item_id": hist_item,
        "hist_cate_id": hist_cate,
    }
    y = torch.randint(0, 2, (batch_size,)).float()
    return feature_dict, y


if __name__ == "__main__":
    torch.manual_seed(2022)
    x, y = get_xy_fd()
    model = DIN(n_items=30, n_cates=6, n_users=4)
    optim = torch.optim.Adagrad(model.parameters(), lr=0.05)
    for epoch in range(4):
        model.train()
        pred = model(x)
        loss = F.binary_cross_entropy(pred, y)
        optim.zero_grad()
        loss.backward()
        optim.step()
    model.eval()
    with torch.no_grad():
        pred = model(x)
    print("train loss %.4f  eval pred %s" % (loss.item(), [round(p, 3) for p in pred.tolist()]))
