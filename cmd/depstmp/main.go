package main
import (
_ "github.com/gin-gonic/gin"
_ "github.com/redis/go-redis/v9"
_ "github.com/go-zookeeper/zk"
_ "gorm.io/gorm"
_ "gorm.io/driver/postgres"
_ "github.com/google/uuid"
_ "github.com/pressly/goose/v3"
_ "github.com/prometheus/client_golang/prometheus"
_ "github.com/HdrHistogram/hdrhistogram-go"
_ "github.com/schollz/progressbar/v3"
_ "github.com/jackc/pgx/v5"
)
func main(){}
