"""hostnet: the two VPCs, the Transit Gateway between them and the hybrid nodes gateway in the
cloud VPC, with an arrow for each direction probed along the path its traffic actually took
(from the source address the server logged and the route table); a direction not probed has
no arrow and says "not measured"."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common

#: Where each direction's arrow runs (y in the drawing), and which way.
LANES = (4.25, 3.75, 3.0)
CLOUD_EDGE, HYBRID_EDGE = 3.6, 6.4
GATEWAY_AT = (CLOUD_EDGE, 1.5)
#: From the gateway up into the cloud nodes' box.
GATEWAY_UP, CLOUD_BOTTOM = (3.1, 2.1), (3.1, 2.7)


def draw(data: dict, title: str) -> Any:
    fig = common.figure(10, 6.2, layout=None)
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    ax = fig.add_axes((0, 0.25, 1, 0.68))
    ax.set_xlim(0, 10)
    ax.set_ylim(0.3, 5.8)
    ax.axis("off")
    _box(ax, (0.2, 0.5), 3.8, 5.0, "cloud VPC", "#eef5fb", top=True)
    _box(ax, (6.0, 0.5), 3.8, 5.0, "on-prem VPC (remote node network)", "#fdf1e6", top=True)
    _box(ax, (0.6, 2.7), CLOUD_EDGE - 0.6, 1.9, "cloud nodes and pods\n(echo-cloud, cloud-client)", "white")
    _box(ax, (0.6, 0.9), CLOUD_EDGE - 0.6, 1.2, "hybrid nodes gateway\n(VXLAN to the leader)", "white")
    _box(ax, (HYBRID_EDGE, 2.7), 3.0, 1.9, "hybrid node\n(host network)", "white")
    # Its label below the lanes: the arrows cross the box.
    _box(ax, (4.35, 1.9), 1.3, 2.9, "Transit\nGateway", "#e9ecef", label_y=2.25)
    legend = []
    for number, (lane, entry) in enumerate(zip(LANES, data["paths"]), start=1):
        outbound = entry["label"].startswith("hybrid")
        path = entry["path"]
        colour = common.OK if entry["status"] == "PASS" else common.FAILED
        if path is None:
            legend.append((f"{number}. {entry['label']}: {common.NOT_MEASURED}", common.MUTED))
            continue
        if path == data["gateway"]:
            # VXLAN to the leader crosses the Transit Gateway too (node to node), then the
            # gateway forwards it into the cloud VPC.
            points = [(HYBRID_EDGE, lane), (5.0, 2.75), GATEWAY_AT, GATEWAY_UP, CLOUD_BOTTOM]
        else:
            points = [(HYBRID_EDGE, lane), (CLOUD_EDGE, lane)]
        if not outbound:
            points.reverse()
        style = "-" if path in (data["tgw"], data["gateway"]) else "--"
        for a, b in zip(points[:-2], points[1:-1]):
            ax.plot([a[0], b[0]], [a[1], b[1]], color=colour, linewidth=2, linestyle=style)
        ax.annotate("", xy=points[-1], xytext=points[-2],
                    arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2, "linestyle": style})
        # The number on the way from the Transit Gateway into the gateway, or along the lane.
        first, second = ((5.0, 2.75), GATEWAY_AT) if path == data["gateway"] else (points[0], points[1])
        badge = (first[0] + (second[0] - first[0]) * 0.5, first[1] + (second[1] - first[1]) * 0.5) \
            if path == data["gateway"] else (first[0] + (second[0] - first[0]) * 0.35, first[1])
        ax.text(*badge, str(number), ha="center", va="center", fontsize=9, fontweight="bold", color="white",
                bbox={"boxstyle": "circle", "facecolor": colour, "edgecolor": "none"})
        legend.append((f"{number}. {entry['label']}: {path} ({entry['status']})", colour))
    for row, (text, colour) in enumerate(legend):
        fig.text(0.03, 0.2 - row * 0.055, text, fontsize=10, color=colour)
    return fig


def _box(ax: Any, corner: tuple[float, float], width: float, height: float, label: str, fill: str,
         top: bool = False, label_y: Any = None) -> None:
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch(corner, width, height, boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=fill, edgecolor=common.MUTED, linewidth=1))
    x = corner[0] + width / 2
    y = label_y if label_y is not None else corner[1] + height - 0.25 if top else corner[1] + height / 2
    ax.text(x, y, label, ha="center", va="center", fontsize=10, fontweight="bold" if top else "normal")
