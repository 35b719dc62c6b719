"""``specdesk export vllm``: placeholder while the exporter is written."""


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export the pair's configuration for another engine")
    p.set_defaults(func=lambda args: 0)
