"""Thin Prefect @task wrappers over solforge calls: one module per stage, no domain logic here."""
