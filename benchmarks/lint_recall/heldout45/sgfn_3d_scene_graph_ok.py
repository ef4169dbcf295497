"""SceneGraphFusion-style 3-D semantic scene graph prediction from object point clouds.

Layout after ShunChengWu/3DSSG (Wu, Wald, Tateno, Navab, Tombari, CVPR 2021): `PointNetfeat` per
object segment, `Gen_edge_descriptor` from centroids and box sizes, `GraphEdgeAttenNetworkLayers`
with `MultiHeadedEdgeAttention` (node attention biased by edge features, edges updated from
both endpoints), `PointNetCls` / `PointNetRelCls` heads, object accuracy and predicate recall,
on synthetic rooms of 3-7 objects batched densely.

Source: pytorch/pytorch#103749, Biohub/esm#299 (conventions.md §3 items 5 and 22), conventions.md §2.3
"""

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OBJ_CLASSES = ["floor", "table", "chair", "cup", "lamp", "shelf"]
REL_CLASSES = ["none", "standing on", "close by"]
SIZES = {0: (4.0, 4.0, 0.05), 1: (1.2, 0.8, 0.75), 2: (0.5, 0.5, 0.9), 3: (0.1, 0.1, 0.12),
         4: (0.25, 0.25, 0.5), 5: (0.9, 0.35, 1.6)}


@dataclass
class SceneBatch:
    obj_points: torch.Tensor
    descriptor: torch.Tensor
    num_objs: torch.Tensor
    obj_labels: torch.Tensor
    rel_labels: torch.Tensor


def build_mlp(dims, do_bn=False, on_last=False):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2 or on_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class PointNetfeat(nn.Module):
    def __init__(self, out_size=64):
        super().__init__()
        self.conv1 = nn.Conv1d(3, 32, 1)
        self.conv2 = nn.Conv1d(32, 64, 1)
        self.fc = nn.Linear(64 + 6, out_size)

    def forward(self, x, descriptor):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        return self.fc(torch.cat([x.max(dim=-1).values, descriptor[:, :6]], dim=-1))


def Gen_edge_descriptor(descriptor):
    centroid, dims = descriptor[..., :3], descriptor[..., 3:6]
    vol = dims.prod(-1).clamp(min=1e-6).log()
    length = dims.max(-1).values.clamp(min=1e-6).log()
    diff = lambda a: a[:, :, None] - a[:, None, :]
    return torch.cat([diff(centroid), diff(dims), diff(vol)[..., None], diff(length)[..., None]], dim=-1)


def lengths_to_node_mask(num_objs, max_objs):
    return torch.arange(max_objs)[None, :] < num_objs[:, None]


class MultiHeadedEdgeAttention(nn.Module):
    def __init__(self, num_heads, dim_node, dim_edge):
        super().__init__()
        self.num_heads, self.d_n = num_heads, dim_node // num_heads
        self.proj_q = nn.Linear(dim_node, dim_node)
        self.proj_k = nn.Linear(dim_node, dim_node)
        self.proj_v = nn.Linear(dim_node, dim_node)
        self.proj_edge = nn.Linear(dim_edge, num_heads)
        self.nn_edge = build_mlp([dim_node * 2 + dim_edge, dim_edge, dim_edge])

    def forward(self, query, edge, value, edge_mask, node_keep):
        B, N, _ = query.shape
        q = self.proj_q(query).view(B, N, self.num_heads, self.d_n).transpose(1, 2)
        k = self.proj_k(query).view(B, N, self.num_heads, self.d_n).transpose(1, 2)
        v = self.proj_v(value).view(B, N, self.num_heads, self.d_n).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_n) + self.proj_edge(edge).permute(0, 3, 1, 2)
        scores = scores.masked_fill(~node_keep[:, None, None, :], float("-inf"))
        prob = F.softmax(scores, dim=-1)
        x = (prob @ v).transpose(1, 2).reshape(B, N, -1)
        pair = torch.cat([query[:, :, None].expand(-1, -1, N, -1), edge, query[:, None].expand(-1, N, -1, -1)], -1)
        edge = self.nn_edge(pair) * edge_mask[..., None]
        return x, edge, prob


class GraphEdgeAttenNetworkLayers(nn.Module):
    def __init__(self, dim_node, dim_edge, num_heads, num_layers):
        super().__init__()
        self.gconvs = nn.ModuleList([MultiHeadedEdgeAttention(num_heads, dim_node, dim_edge) for _ in range(num_layers)])
        self.node_mlps = nn.ModuleList([build_mlp([dim_node * 2, dim_node, dim_node]) for _ in range(num_layers)])

    def forward(self, node_feature, edge_feature, edge_mask, node_keep):
        probs = []
        for gconv, mlp in zip(self.gconvs, self.node_mlps):
            msg, edge_feature, prob = gconv(node_feature, edge_feature, node_feature, edge_mask, node_keep)
            node_feature = node_feature + mlp(torch.cat([node_feature, msg], dim=-1))
            probs.append(prob)
        return node_feature, edge_feature, probs


class SGFN(nn.Module):
    def __init__(self, dim_node=64, dim_edge=64, num_heads=4, num_layers=2):
        super().__init__()
        self.obj_encoder = PointNetfeat(dim_node)
        self.rel_encoder = build_mlp([8, dim_edge, dim_edge])
        self.gcn = GraphEdgeAttenNetworkLayers(dim_node, dim_edge, num_heads, num_layers)
        self.obj_predictor = build_mlp([dim_node, dim_node, len(OBJ_CLASSES)])
        self.rel_predictor = build_mlp([dim_edge, dim_edge, len(REL_CLASSES)])

    def forward(self, batch):
        B, N = batch.obj_points.shape[:2]
        obj_feature = self.obj_encoder(batch.obj_points.flatten(0, 1), batch.descriptor.flatten(0, 1)).view(B, N, -1)
        edge_feature = self.rel_encoder(Gen_edge_descriptor(batch.descriptor))
        node_keep = lengths_to_node_mask(batch.num_objs, N)
        edge_mask = node_keep[:, :, None] & node_keep[:, None, :]
        obj_feature, edge_feature, probs = self.gcn(obj_feature, edge_feature, edge_mask, node_keep)
        return self.obj_predictor(obj_feature), self.rel_predictor(edge_feature), edge_mask


def random_scene(rng, max_objs=7):
    objs = [(0, np.array([0.0, 0.0, 0.0]), -1)]
    for _ in range(rng.integers(2, max_objs)):
        cls = int(rng.choice([1, 2, 3, 4, 5], p=[0.25, 0.25, 0.2, 0.15, 0.15]))
        tables = [i for i, o in enumerate(objs) if o[0] in (1, 5)]
        if cls in (3, 4) and tables:
            sup = int(rng.choice(tables))
            base = objs[sup][1] + np.array([*rng.uniform(-0.3, 0.3, 2), SIZES[objs[sup][0]][2]])
        else:
            sup, base = 0, np.array([*rng.uniform(-1.8, 1.8, 2), SIZES[0][2]])
        objs.append((cls, base, sup))
    points, desc, labels = [], [], []
    for cls, base, sup in objs:
        dims = np.array(SIZES[cls]) * rng.uniform(0.9, 1.1, 3)
        pts = base + np.array([0, 0, dims[2] / 2]) + (rng.uniform(-0.5, 0.5, (32, 3)) * dims)
        points.append(pts.T)
        desc.append(np.concatenate([pts.mean(0), dims]))
        labels.append(cls)
    n = len(objs)
    rel = np.zeros((n, n), dtype=np.int64)
    for i, (_, base, sup) in enumerate(objs):
        if sup >= 0:
            rel[i, sup] = 1
        for j, (_, base_j, sup_j) in enumerate(objs):
            if i != j and sup == sup_j and sup >= 0 and np.linalg.norm(desc[i][:2] - desc[j][:2]) < 0.8:
                rel[i, j] = 2
    return np.array(points, dtype=np.float32), np.array(desc, dtype=np.float32), np.array(labels), rel


def collate_scenes(scenes, max_objs=7):
    B = len(scenes)
    pts, desc = torch.zeros(B, max_objs, 3, 32), torch.zeros(B, max_objs, 6)
    obj_labels = torch.full((B, max_objs), -100)
    rel_labels = torch.full((B, max_objs, max_objs), -100)
    num_objs = torch.tensor([len(s[2]) for s in scenes])
    for b, (p, d, lab, rel) in enumerate(scenes):
        n = len(lab)
        pts[b, :n], desc[b, :n] = torch.from_numpy(p), torch.from_numpy(d)
        obj_labels[b, :n] = torch.from_numpy(lab)
        rel_labels[b, :n, :n] = torch.from_numpy(rel)
        rel_labels[b, torch.arange(n), torch.arange(n)] = -100
    return SceneBatch(pts, desc, num_objs, obj_labels, rel_labels)


def evaluate(model, batch):
    model.eval()
    with torch.no_grad():
        obj_logits, rel_logits, edge_mask = model(batch)
    valid = batch.obj_labels != -100
    obj_acc = (obj_logits.argmax(-1) == batch.obj_labels)[valid].float().mean().item()
    pos = batch.rel_labels > 0
    rel_recall = (rel_logits.argmax(-1) == batch.rel_labels)[pos].float().mean().item()
    return obj_acc, rel_recall


if __name__ == "__main__":
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    train_scenes = [random_scene(rng) for _ in range(640)]
    test_batch = collate_scenes([random_scene(rng) for _ in range(200)])
    model = SGFN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    rel_weight = torch.tensor([0.2, 1.0, 1.0])
    for epoch in range(10):
        model.train()
        order = rng.permutation(len(train_scenes))
        for i in range(0, len(order), 32):
            batch = collate_scenes([train_scenes[j] for j in order[i:i + 32]])
            obj_logits, rel_logits, edge_mask = model(batch)
            loss_obj = F.cross_entropy(obj_logits.flatten(0, 1), batch.obj_labels.flatten(), ignore_index=-100)
            loss_rel = F.cross_entropy(rel_logits[edge_mask], batch.rel_labels[edge_mask], weight=rel_weight,
                                       ignore_index=-100)
            loss = loss_obj + loss_rel
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if epoch % 3 == 2 or epoch == 9:
            obj_acc, rel_recall = evaluate(model, test_batch)
            print(f"epoch {epoch + 1}: loss {loss.item():.3f}, object acc {obj_acc:.3f}, predicate recall {rel_recall:.3f}")
