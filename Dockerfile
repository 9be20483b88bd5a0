# The KafkaIQ broker. Build: docker build -t kafkaiq .
# Run:   docker run -p 127.0.0.1:9092:9092 kafkaiq
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin kafkaiq

FROM debian:bookworm-slim
COPY --from=build /src/target/release/kafkaiq /usr/local/bin/kafkaiq
VOLUME /var/lib/kafkaiq
EXPOSE 9092
ENTRYPOINT ["kafkaiq"]
# Inside a container the listener must accept connections from outside it; override
# advertised.listeners with the name clients use to reach the container.
CMD ["--override", "listeners=PLAINTEXT://0.0.0.0:9092", \
     "--override", "advertised.listeners=PLAINTEXT://localhost:9092", \
     "--override", "log.dirs=/var/lib/kafkaiq"]
