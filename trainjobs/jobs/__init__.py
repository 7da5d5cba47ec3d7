"""The job core that the API host and the GPU hosts both load: tables, sessions, repositories, the
job-life transitions, the timeline, the job cache, the worker gateway and the scheduling rule."""
