"""E2E worker: rank 1 raises under torch's @record, which writes TORCHELASTIC_ERROR_FILE."""
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("root cause from rank 1")
    time.sleep(60)


if __name__ == "__main__":
    main()
